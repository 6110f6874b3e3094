"""Ordered branches for framework code: ``ctx.branches(labels)``'s kernel state.

A framework that runs tool calls concurrently on its own (asyncio tasks, a thread pool)
reserves their order first: the group takes one position ``p`` of the current scope and
records there a gather marker (the record ``ctx.gather`` writes, checked on replay before
any branch runs); branch ``i`` then numbers its recording calls ``p.i.0, p.i.1, ...`` in
a child scope of its own, whatever runs at the same time. The group ends when its parent
scope takes its next position.

This module holds only the bookkeeping (which branch is entered, whether the group is
over); entering a branch for the running task or thread is the runtime's
(:class:`durably.runtime.branches.Branches`), which also serialises it across threads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import ConfigError
from .scope import Scope

if TYPE_CHECKING:
    from .kernel import RunCore


class BranchGroup:
    """One ``ctx.branches`` group: its position, labels and branch scopes."""

    __slots__ = ("closed", "core", "entered", "labels", "parent", "pos", "scopes")

    def __init__(self, core: RunCore, parent: Scope, pos: str, labels: list[str]) -> None:
        self.core = core
        self.parent = parent
        self.pos = pos
        self.labels = labels
        # Branch scopes are made on first entry and kept: a branch entered again later
        # continues its own numbering.
        self.scopes: dict[int, Scope] = {}
        self.entered: set[int] = set()
        self.closed = False

    def enter(self, index: object) -> Scope:
        """The scope of branch ``index``, marked entered; a bad index, a branch already
        entered elsewhere or a group that is over blocks the run (ConfigError)."""
        core = self.core
        core.guard(halt=False)
        n = len(self.labels)
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < n:
            raise core.poison(
                ConfigError(
                    f"ctx.branches at {self.pos}: branch({index!r}) is not a branch of this"
                    f" group of {n} ({self.labels!r}); pass an index from 0 to {n - 1}, in"
                    " the order the labels were listed. The run is blocked; fix the code,"
                    " then resume it."
                )
            )
        if self.closed:
            raise core.poison(ConfigError(self._over_text(index)))
        if index in self.entered:
            raise core.poison(
                ConfigError(
                    f"ctx.branches at {self.pos}: branch {index} ({self.labels[index]!r}) was"
                    " entered while it is entered already (from another task or thread):"
                    " its positions would depend on timing. Run each listed call in its own"
                    " branch (one index per call). The run is blocked; fix the code, then"
                    " resume it."
                )
            )
        scope = self.scopes.get(index)
        if scope is None:
            scope = Scope(core, f"{self.pos}.{index}.")
            scope.member = self
            self.scopes[index] = scope
        self.entered.add(index)
        core.gathers.entered += 1
        return scope

    def leave(self, index: int, failed: bool) -> None:
        """Branch ``index`` was left; ``failed`` when by an exception. A branch that
        failed may have stopped (been cancelled by the framework) at another point than
        a replay will: what it recorded and a replay does not ask for again is no sign
        of changed code (as for a gather that failed)."""
        if index in self.entered:
            self.entered.discard(index)
            self.core.gathers.entered -= 1
        scope = self.scopes.get(index)
        if scope is not None and scope.stream is not None:
            scope.stream.finish(f"the end of branch {self.pos}.{index}")
        if failed:
            prefix = f"{self.pos}."
            failed_groups = self.core.gathers.failed
            if prefix not in failed_groups:
                failed_groups.append(prefix)

    def close(self, parent: Scope) -> None:
        """The parent scope takes its next position: the group ends. A branch still in a
        step (or another live wait) is code of the parent running concurrently with it:
        the concurrent-use error."""
        for index, scope in sorted(self.scopes.items()):
            if scope.busy is not None:
                raise self.core.poison(
                    ConfigError(
                        f"position {parent.peek()} was asked for while {scope.busy} of"
                        f" branch {index} of the ctx.branches group at {self.pos} is still"
                        " running: the framework's next call must wait for the calls it"
                        " started (await its tasks, join its threads) so that positions do"
                        " not depend on timing. The run is blocked; fix the code, then"
                        " resume it."
                    )
                )
        self.closed = True
        parent.group = None

    def closed_text(self, scope: Scope) -> str:
        """Why a recording call of a branch of a group that is over is refused."""
        index = int(scope.prefix.split(".")[-2])
        return self._over_text(index)

    def _over_text(self, index: int) -> str:
        return (
            f"ctx.branches at {self.pos}: branch {index} ({self.labels[index]!r}) recorded"
            " after its group ended (the code that opened it went on to its next recorded"
            " call first), so its positions would depend on timing. Finish every branch"
            " before the next recorded call of the code that opened the group. The run is"
            " blocked; fix the code, then resume it."
        )
