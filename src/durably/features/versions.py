"""Code versions inside a run (``ctx.patched``, ``ctx.deprecate_patch``): a ``patched``
marker at a position says the run took the code path of a change; a run recorded before
the change has something else there (or later) and goes on the old path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import ConfigError
from ..journal import codec
from ..journal.keys import position_key
from ..journal.records import HALT, PATCHED
from ..journal.text import check_name
from ..steps import given_text

if TYPE_CHECKING:
    from ..replay.kernel import RunCore


def patched(core: RunCore, change_id: str) -> bool:
    """``ctx.patched(change_id)`` at the next position p: a marker for this id recorded
    at p is consumed (True); anything else recorded at p or later in this scope or an
    enclosing one means the run started before the change (False, nothing consumed);
    nothing recorded: the marker is recorded (True), riding with the next write."""
    core.guard()
    _check_change_id(core, change_id, "ctx.patched")
    scope = core.scope()
    pos = scope.peek()
    rec = core.history.get(pos)
    if rec is not None and rec.kind == PATCHED and rec.name == change_id:
        core.consumed.add(scope.take())
        return True
    if rec is not None and rec.kind == HALT:
        scope.take()  # raises the recorded halt
    if rec is not None or _recorded_after(core, pos):
        return False
    pos = scope.take()
    core.live(pos)
    core.record_marker(pos, PATCHED, change_id, _patch_digest(change_id), "true")
    return True


def deprecate_patch(core: RunCore, change_id: str) -> None:
    """``ctx.deprecate_patch(change_id)``: consume a marker for this id recorded at the
    next position, if one is there (a run that took the patched path); never record."""
    core.guard()
    _check_change_id(core, change_id, "ctx.deprecate_patch")
    scope = core.scope()
    rec = core.history.get(scope.peek())
    if rec is not None and rec.kind == PATCHED and rec.name == change_id:
        core.consumed.add(scope.take())


def _check_change_id(core: RunCore, change_id: object, where: str) -> None:
    if not isinstance(change_id, str) or not change_id:
        raise core.poison(
            ConfigError(
                f"{where}: the change id must be a non-empty str, got {given_text(change_id)}"
            )
        )
    try:
        check_name(change_id, f"{where}: the change id")
    except ConfigError as exc:
        raise core.poison(exc) from None


def _recorded_after(core: RunCore, pos: str) -> bool:
    """Whether anything is recorded at a position after ``pos`` in its scope or in an
    enclosing one (positions of sibling gather branches do not count)."""
    here = position_key(pos)
    return any(_later(position_key(q), here) for q in core.history)


def _later(q: tuple[int, ...], p: tuple[int, ...]) -> bool:
    """Whether position ``q`` comes at or after ``p`` in p's scope or an enclosing one.

    Positions alternate: scope index, branch, scope index, ... At each enclosing level
    (even index j) a larger index is later; an equal index with the same branch goes one
    level deeper; another branch is a sibling, which does not count."""
    for j in range(0, len(p), 2):
        if j >= len(q):
            return False  # an enclosing gather's own marker: before p
        if q[j] != p[j]:
            return q[j] > p[j]
        if j + 1 == len(p):
            return True  # p itself, or a position nested under it
        if j + 1 >= len(q) or q[j + 1] != p[j + 1]:
            return False  # the gather's marker, or a sibling branch
    return False


def _patch_digest(change_id: str) -> str:
    return codec.digest("durably.patched", [change_id], {})
