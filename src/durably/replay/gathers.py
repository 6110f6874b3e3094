"""Groups of branches: ``ctx.gather``'s and ``ctx.branches``'. A group takes one position
``p`` of the current scope and records there a ``gather`` record of its arity and labels,
checked on replay before any branch runs; branch ``i`` numbers its positions ``p.i.0,
p.i.1, ...`` in a child scope. The async driver runs ``ctx.gather``'s branches
(``durably.context``, ``runtime/settle.py``); ``ctx.branches``' are entered by framework
code (:mod:`durably.replay.branches`, :mod:`durably.runtime.branches`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import NonDeterminism
from ..journal import codec
from ..journal.records import GATHER, StepRecord
from .branches import BranchGroup

if TYPE_CHECKING:
    from .kernel import RunCore
    from .scope import Scope

GATHER_NAME = "durably.gather"
"""The name of every group's ``gather`` record."""


def gather_begin(core: RunCore, labels: list[str]) -> tuple[Scope, str]:
    """Take a gather's position, check or record its ``gather`` record
    (:func:`group_marker`), and mark the scope busy; the driver then runs branch ``i`` in
    a child scope ``"{pos}.{i}."``."""
    scope, pos = group_marker(core, labels)
    scope.busy = f"gather {pos}"
    return scope, pos


def gather_end(core: RunCore, scope: Scope, pos: str, failed: bool) -> None:
    """The gather at ``pos`` is over; ``failed`` when it ended by raising."""
    scope.busy = None
    if failed:
        core.gathers.failed.append(f"{pos}.")


def branches_begin(core: RunCore, labels: list[str]) -> BranchGroup:
    """``ctx.branches(labels)``: take the position, check or record the gather marker
    (:func:`group_marker`), and open a group on the current scope, which stays free (the
    framework's own code runs between its calls); the group ends when the scope takes
    its next position."""
    scope, pos = group_marker(core, labels)
    group = BranchGroup(core, scope, pos, labels)
    scope.group = group
    return group


def group_marker(core: RunCore, labels: list[str]) -> tuple[Scope, str]:
    """Take the next position of the current scope for a group of branches, and check or
    record its ``gather`` record.

    The record's digest covers ``[arity, labels]``, so a deploy that shifts or changes
    the group is caught here, before any branch runs. The record rides with the next
    durable write (any branch's first write, an effect's intent included), so it is in
    the journal before any branch's effect. A journal written before gathers were
    recorded has its branches' records under ``pos`` and none at ``pos``: accepted
    without the check.
    """
    core.guard_replay()
    core.check_dropped()
    scope = core.scope()
    pos = scope.take()
    shape = [len(labels), labels]
    digest = codec.digest(GATHER_NAME, shape, {})
    rec = core.history.get(pos)
    if rec is not None:
        core.consumed.add(pos)
        if rec.kind != GATHER or rec.digest != digest:
            raise core.poison(NonDeterminism(_gather_mismatch(pos, rec, shape)))
    elif pos not in _legacy(core):
        core.live(pos)  # a new gather marker: under replay --check, history ends here
        text = codec.dumps(shape, f"gather {pos}")
        core.record_marker(pos, GATHER, GATHER_NAME, digest, text)
    return scope, pos


def _legacy(core: RunCore) -> frozenset[str]:
    """Positions of gathers whose branches are recorded but which have no record of their
    own (journals from before gathers were recorded)."""
    state = core.gathers
    if state.legacy is None:
        parents: set[str] = set()
        for p in core.history:
            parts = p.split(".")
            parents.update(".".join(parts[:i]) for i in range(1, len(parts), 2))
        state.legacy = frozenset(parents - set(core.history))
    return state.legacy


def _gather_mismatch(pos: str, rec: StepRecord, shape: list[Any]) -> str:
    asked = _gather_text(shape)
    if rec.kind == GATHER:
        had = _gather_text(codec.loads(rec.output or "null"))
    else:
        had = repr(rec.name)
    return (
        f"step {pos}: history has {had}, code asked for {asked}. The code no longer matches"
        " this run's history, and no branch of the gather ran: revert the change, or let old"
        " runs finish on workers that serve their version first. The run is blocked; nothing"
        " recorded was lost, and it resumes once the code matches."
    )


def _gather_text(shape: Any) -> str:
    try:
        arity, labels = shape
        return f"a gather of {arity} branches {list(labels)!r}"
    except (TypeError, ValueError):
        return f"a gather {shape!r}"
