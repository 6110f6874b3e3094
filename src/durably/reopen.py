"""Re-opening runs: what a retry drops and what a fork copies (pure: no I/O).

A person's retry of a *failed* run removes only the failures that ended it, so the failed
step runs again under its old key while every recorded result replays. A *fork* copies
the recorded results of another run below a top-level position into a new run (a new
incarnation, so new keys), which goes live from that position on. The engine does the
I/O (:meth:`durably.Engine.retry`, :meth:`durably.Engine.fork`); the decisions are here,
where they can be read and tested on their own.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from . import codec
from .errors import ConfigError, SerializationError
from .history import (
    APPROVAL,
    COMPENSATE,
    FAILED,
    HALT,
    INTENT,
    OK,
    WAITING,
    RunRecord,
    StepRecord,
    position_key,
    top_level,
)
from .shell import command

# Every in-doubt reason the core writes starts with "step <position> " (core._doubt).
_DOUBT_REASON = re.compile(r"^step ([0-9]+(?:\.[0-9]+\.[0-9]+)*) ")


def failed_frontier(history: Sequence[StepRecord]) -> list[str]:
    """The positions of the failures that ended a failed run.

    A step failure that propagated out of the workflow is the last record of its scope (its
    branch, or the top level) under the last top-level position of the history: nothing
    ran after it there. Earlier failures that the workflow caught and went on from are
    kept, so the run replays the same path up to the failed step. A run that failed
    without a failed step at its frontier (the workflow itself raised) has none: its retry
    replays everything and runs the workflow's code after the last record again.
    """
    if not history:
        return []
    last_top = max(top_level(r.position) for r in history)
    last_in_scope: dict[str, StepRecord] = {}
    for rec in history:
        if top_level(rec.position) != last_top:
            continue
        scope = rec.position.rpartition(".")[0]
        seen = last_in_scope.get(scope)
        if seen is None or position_key(rec.position) > position_key(seen.position):
            last_in_scope[scope] = rec
    return sorted(
        (r.position for r in last_in_scope.values() if r.status == FAILED), key=position_key
    )


def check_reopenable(
    run: RunRecord, history: Sequence[StepRecord], frontier: Sequence[str]
) -> None:
    """Refuse a retry of a failed run that could not re-open at the step that failed it.

    When the run's failure is a step's (the same error type and message) but that step is
    not at the frontier, the workflow recorded more positions while handling the failure
    (a ``finally`` or ``except ...: ctx.step(...); raise`` block). Its retry would replay
    the same failure and fail again at once without running anything, and dropping the
    later records instead would hand their positions, and keys already sent, to other
    steps. A fork at the failed step's top-level position redoes it under new keys.
    """
    ending = {
        r.position
        for r in history
        if r.status == FAILED
        and (r.error_type, r.error_message) == (run.error_type, run.error_message)
    }
    if not ending or ending.intersection(frontier):
        return
    pos = min(ending, key=position_key)
    later = [r.position for r in history if position_key(r.position) > position_key(pos)]
    raise ConfigError(
        f"run {run.run_id!r} failed at step {pos}, but the workflow went on recording"
        f" after that failure (position {', '.join(later[:5])}{', ...' if len(later) > 5 else ''}:"
        " a finally or except block), so a retry cannot re-open it at step"
        f" {pos}: it would replay the same failure. Fork it instead:"
        f" `{command('fork', run.run_id, options=f'--at {top_level(pos)}')}`"
        f" (engine.fork(run_id, at={top_level(pos)}))"
        " runs from there under new keys; effects from there on happen again, so check"
        " the receiving systems first. Nothing was changed."
    )


def compensated_steps(history: Sequence[StepRecord]) -> list[str]:
    """The positions of the steps a saga undid (its ``compensate`` markers name them),
    in program order; a marker that cannot be read counts by its own position."""
    undone: set[str] = set()
    for rec in history:
        if rec.kind != COMPENSATE:
            continue
        try:
            steps = codec.loads(rec.output or "null")["steps"]
            undone.update(str(p) for p in steps)
        except (SerializationError, KeyError, TypeError):
            undone.add(rec.position)
    return sorted(undone, key=position_key)


def check_not_compensated(run: RunRecord, history: Sequence[StepRecord]) -> None:
    """Refuse a retry of a failed run whose saga compensated: its undone steps would
    replay as done (their results are recorded) while the world has undone them, and
    the failure would replay and compensate nothing new. A fork at the first undone
    step's top-level position redoes the saga from there under new keys."""
    undone = compensated_steps(history)
    if not undone:
        return
    at = top_level(undone[0])
    listed = ", ".join(undone[:5]) + (", ..." if len(undone) > 5 else "")
    broken = ""
    if (run.error_type or "").endswith("CompensationFailed"):
        broken = (
            " A compensation failed, so part of what the saga did may still be in place:"
            " undo it by hand before redoing the work."
        )
    raise ConfigError(
        f"run {run.run_id!r} failed after a saga compensated it (the steps at {listed} were"
        " undone), so a retry cannot re-open it: those steps would replay as done while"
        f" their effects were undone.{broken} Fork it instead:"
        f" `{command('fork', run.run_id, options=f'--at {at}')}`"
        f" (engine.fork(run_id, at={at})) starts a new run that redoes the work"
        f" from position {at} under new keys; effects from there on happen again, so check"
        " the receiving systems first. Nothing was changed."
    )


def doubt_position(reason: str | None) -> str | None:
    """The position an ``in_doubt`` run's reason names, or None when it names none."""
    m = _DOUBT_REASON.match(reason or "")
    return m.group(1) if m else None


def top_level_at(at: object) -> int:
    """A fork's ``at`` (an int, or its digits as typed on a command line) as an int;
    ``ConfigError`` for anything else, naming the gather to fork at for a position
    inside one."""
    if isinstance(at, str) and at.isascii() and at.isdigit():
        at = int(at)
    if isinstance(at, str) and re.fullmatch(r"\d+(\.\d+\.\d+)+", at):
        raise ConfigError(
            f"at={at}: fork at a top-level position; {at} is inside the gather at"
            f" {top_level(at)}, so fork at {top_level(at)} to redo that whole gather"
        )
    if isinstance(at, bool) or not isinstance(at, int) or at < 0:
        raise ConfigError(f"at={at!r}: fork at a top-level position, an int >= 0")
    return at


def first_decision(history: Sequence[StepRecord]) -> int | None:
    """The top-level position of the first decided approval request of ``history``
    (approved, rejected or expired; under a gather, the gather's position), or None."""
    decided = [top_level(r.position) for r in history if r.kind == APPROVAL and r.status == OK]
    return min(decided, default=None)


def fork_at(at: object, history: Sequence[StepRecord]) -> int:
    """Check a fork's ``at`` against the original's history and return the top-level
    position the fork goes live at: ``at``, or the first decided approval below it.

    ``at`` is a top-level position from 0 up to one past the last recorded one. **A fork
    never carries a decision**: a decided approval request below ``at`` is not copied,
    and neither is anything after it (what the workflow did next depended on that
    decision), so the fork goes live at the request, which parks for a new decision by a
    person (copying it would run the approved effect again, under new keys, with nobody
    approving it). Forking past an effect in doubt (an intent without a result) is
    refused: what it did is unknown, so there is no result to copy.
    """
    at = top_level_at(at)
    end = 1 + max((top_level(r.position) for r in history), default=-1)
    if at > end:
        raise ConfigError(
            f"at={at}: the run records positions 0..{end - 1} only; fork at {end} or earlier"
            " (`durably runs show` lists them)"
        )
    decided = first_decision(history)
    if decided is not None and decided < at:
        at = decided  # nothing past it is copied, so nothing past it is checked
    doubts = sorted({top_level(r.position) for r in history if r.status == INTENT})
    if doubts and doubts[0] < at:
        raise ConfigError(
            f"at={at}: position {doubts[0]} holds an effect in doubt (it may or may not have"
            f" happened, so there is no result to copy); fork at {doubts[0]} or earlier, or"
            " settle it first with `durably retry` or `durably skip`"
        )
    undone = compensated_steps(history)
    if undone and top_level(undone[0]) < at:
        first = top_level(undone[0])
        raise ConfigError(
            f"at={at}: a saga undid the step at {undone[0]} (its compensation ran), so its"
            " recorded result would be copied as done while its effect was undone; fork at"
            f" {first} or earlier to redo the saga from there under new keys"
        )
    halts = sorted(top_level(r.position) for r in history if r.kind == HALT)
    if halts and halts[0] < at:
        what = next(r.name for r in history if r.kind == HALT and top_level(r.position) == halts[0])
        stop = "a cancel" if what == "durably.cancel" else "its budget"
        raise ConfigError(
            f"at={at}: the run was stopped by {stop} at position {halts[0]}; a fork past it"
            f" would copy that stop and end the same way: fork at {halts[0]} or earlier"
        )
    return at


def fork_records(history: Sequence[StepRecord], at: int) -> list[StepRecord]:
    """The records a fork at ``at`` copies: every recorded result (a step's output or its
    failure, a recorded time, random number, uuid, marker or finished timer) at a
    top-level position below ``at``, with everything under it (the branches of a gather).
    Intents and waits in progress (a ``waiting`` timer) are never copied: the fork reaches
    such a position live (a timer not over starts afresh in the fork). Nor is a decided
    approval request or anything from its top-level position on (see :func:`fork_at`):
    the fork asks for the decision again.
    """
    decided = first_decision(history)
    if decided is not None:
        at = min(at, decided)
    return sorted(
        (r for r in history if r.status not in (INTENT, WAITING) and top_level(r.position) < at),
        key=lambda r: position_key(r.position),
    )
