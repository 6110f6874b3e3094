"""``durably.Branches``: ordered concurrency for framework code (``ctx.branches``).

The kernel's side (the marker, the positions, when the group ends) is
:class:`durably.replay.branches.BranchGroup`; this facade enters a branch for the running
asyncio task or thread only (the scope context variable) and, in a sync run, makes the
run's lock so that branches may record from several threads at once.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..errors import ConfigError
from ..journal.text import check_name
from ..limits import SCOPE_POSITIONS_MAX
from ..replay import gathers
from ..replay.scope import SCOPE
from .lock import RunLock

if TYPE_CHECKING:
    from ..replay.branches import BranchGroup
    from ..replay.kernel import RunCore
    from .drive import Executor


class Branches:
    """A group of branches whose positions follow the order of their labels, made by
    ``ctx.branches(labels)``: ``with group.branch(i):`` runs the code of call ``i`` (in an
    asyncio task or a thread), and every recording call inside numbers ``p.i.0, p.i.1, ...``
    whatever else runs at the same time. See docs/api.md ("Ordered branches")."""

    __slots__ = ("_ex", "_group", "_loop_thread")

    def __init__(self, group: BranchGroup, ex: Executor, loop_thread: int | None) -> None:
        self._group = group
        self._ex = ex
        # An async run's branches are entered from tasks of its loop (this thread).
        self._loop_thread = loop_thread

    @property
    def position(self) -> str:
        """The position the group took (its gather marker's)."""
        return self._group.pos

    @property
    def labels(self) -> list[str]:
        """The labels the group was opened with, in their order."""
        return list(self._group.labels)

    def __len__(self) -> int:
        return len(self._group.labels)

    def __repr__(self) -> str:
        return f"<durably.Branches at {self._group.pos} of {len(self._group.labels)}>"

    @contextlib.contextmanager
    def branch(self, index: int) -> Iterator[None]:
        """Run the code inside as branch ``index`` (its recording calls take positions
        ``p.index.0, p.index.1, ...``) in the current asyncio task or thread only. Entered
        again later, a branch goes on with its own numbering. An index out of range, one
        entered from two places at once, or entry after the group ended (the code that
        opened it took its next position) blocks the run with a ConfigError."""
        group, ex = self._group, self._ex
        core = group.core
        if self._loop_thread is not None and threading.get_ident() != self._loop_thread:
            raise core.poison(
                ConfigError(
                    f"ctx.branches at {group.pos}: branch({index!r}) was entered from"
                    " another thread than the async workflow's event loop; enter the"
                    " branches of an async workflow from its asyncio tasks (a sync"
                    " workflow's may be entered from threads). The run is blocked; fix the"
                    " code, then resume it."
                )
            )
        with ex.hold():
            scope = group.enter(index)
        token = SCOPE.set(scope)
        failed = True
        try:
            yield
            failed = False
        finally:
            try:
                SCOPE.reset(token)
            except ValueError:  # left in another context than entered: set it back
                SCOPE.set(None)
            with ex.hold():
                group.leave(index, failed)


def open_branches(core: RunCore, ex: Executor, labels: object, is_async: bool) -> Branches:
    """``ctx.branches(labels)`` of a sync or an async context."""
    checked = _labels(core, labels)
    loop_thread = threading.get_ident() if is_async else None
    if not is_async and ex.lock is None:
        # From now on the run's branches may record from several threads.
        ex.lock = RunLock()
    with ex.hold():
        group = gathers.branches_begin(core, checked)
    return Branches(group, ex, loop_thread)


def _labels(core: RunCore, labels: object) -> list[str]:
    """The labels as a list of str fit to be recorded; anything else blocks the run."""
    if isinstance(labels, str) or not isinstance(labels, list | tuple):
        raise core.poison(
            ConfigError(
                "ctx.branches(labels): labels must be a list of str (one per concurrent"
                f" call, in the order the calls were listed), got {type(labels).__name__}"
            )
        )
    out: list[str] = []
    for label in labels:
        if not isinstance(label, str) or not label:
            raise core.poison(
                ConfigError(
                    "ctx.branches(labels): every label must be a non-empty str, got"
                    f" {type(label).__name__}"
                )
            )
        try:
            check_name(label, "ctx.branches: a label")
        except ConfigError as exc:
            raise core.poison(exc) from None
        out.append(label)
    if len(out) > SCOPE_POSITIONS_MAX:
        raise core.poison(
            ConfigError(
                f"ctx.branches(labels): {len(out):,} labels; at most"
                f" {SCOPE_POSITIONS_MAX:,} branches in one group"
            )
        )
    return out
