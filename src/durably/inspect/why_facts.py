"""What the journal says about a run, structured: the facts ``durably runs why`` words.

:func:`gather` reads them from an engine through its public reads only (the inspect room
sits above the engine: ``Engine`` never imports it) into a frozen :class:`Facts`: the run
row, its history, what the event stream says about the step in flight, the queue ahead
of it, the spend. Nothing here chooses words; :mod:`.why_sentences` does, from these
facts alone, so each row of ``docs/why.md`` is a unit of its own.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from .. import events as ev_kinds
from ..budget import Spend
from ..events import Event
from ..history import (
    APPROVAL,
    FAILED,
    SIGNAL,
    WAITING,
    RunRecord,
    StepRecord,
    position_key,
)
from ..ownership import owner_dead
from ..runlist import LIST_RUNS_LIMIT_MAX

if TYPE_CHECKING:
    from ..engine import Engine


QUEUE_SCAN_MAX = 10_000
"""Runs of one status looked at to count a queue (beyond it the count is "at least")."""
EVENTS_SCAN_MAX = 100_000
"""Events read to find the step in flight and the last error (a bound on one ``why``)."""
_STREAM_TIER: Final = frozenset({ev_kinds.MODEL_DELTA, ev_kinds.MODEL_RESTART})


@dataclass(frozen=True, slots=True)
class StepActivity:
    """What the event stream says about the latest step: its position, name, the attempt
    running (1 for the first), the retry budget when known, and the error of the attempt
    before (a retried step)."""

    position: str
    name: str
    attempt: int = 1
    attempts_max: int | None = None
    retry_error_type: str | None = None
    retry_error_message: str | None = None
    finished: bool = False


@dataclass(frozen=True, slots=True)
class QueueView:
    """The queue in front of a queued run: runs ahead of it (``capped`` when the count hit
    :data:`QUEUE_SCAN_MAX`) and the live workers serving its queue."""

    ahead: int
    workers: int
    capped: bool = False


@dataclass(frozen=True, slots=True)
class Facts:
    """Everything :func:`explain_facts` reads. ``owner_gone``: the owner is provably dead (judged
    by the caller, since that looks at this host's processes). ``last_error``: the last
    error type and message the stream recorded (for a quarantined run)."""

    run: RunRecord
    history: Sequence[StepRecord] = ()
    now: float = 0.0
    owner_gone: bool = False
    activity: StepActivity | None = None
    queue: QueueView | None = None
    last_error: tuple[str, str] | None = None
    blocked_type: str | None = None
    spend: Spend | None = None
    park_kind: str | None = None


def orphaned_row(run: RunRecord, now: float) -> bool:
    """True when a running run's row alone shows nobody drives it (no owner, or its lease
    expired); a provably dead owner is the caller's judgement (``Facts.owner_gone``)."""
    return run.status == "running" and (
        run.owner is None or run.lease_expires_at is None or run.lease_expires_at <= now
    )


def gather(engine: Engine, run_id: str, now: float) -> Facts:
    """The facts :func:`explain_facts` needs about ``run_id``, read through ``engine``'s
    public methods (raises ``RunNotFound`` for an unknown run)."""
    run: RunRecord = engine.get_run(run_id)
    history = engine.history(run_id)
    gone = run.status == "running" and run.owner is not None and owner_dead(run.owner)
    queue = queue_view(engine, run) if run.status in ("queued", "parked") else None
    events = read_events(engine, run_id)
    spend = engine.spend(run_id) if run.status in ("running", "failed") else None
    return Facts(
        run,
        history,
        now,
        gone,
        step_activity(events),
        queue,
        last_error_of(events, history),
        blocked_type(events),
        spend,
        park_kind(events),
    )


def queue_view(engine: Engine, run: RunRecord) -> QueueView:
    """Runs of ``run``'s queue that a worker takes before it (queued earlier; workers take
    the oldest first; at most :data:`QUEUE_SCAN_MAX` queued runs of the queue are looked
    at), and the live workers serving that queue (their rows in the journal, less those
    whose pid is provably gone)."""
    me = (run.created_at, run.run_id)
    ahead = scanned = 0
    after: str | None = None
    while scanned < QUEUE_SCAN_MAX:
        limit = min(LIST_RUNS_LIMIT_MAX, QUEUE_SCAN_MAX - scanned)
        page = engine.list_runs(status="queued", queue=run.queue, after=after, limit=limit)
        scanned += len(page.runs)
        ahead += sum(1 for r in page.runs if (r.created_at, r.run_id) < me)
        if page.next is None:
            break
        after = page.next
    workers = engine.live_workers(run.queue)
    return QueueView(ahead, len(workers), capped=scanned >= QUEUE_SCAN_MAX)


def read_events(engine: Engine, run_id: str) -> list[Event]:
    """The run's events, oldest first, without the stream tier's ``model.delta`` and
    ``model.restart`` (tokens say nothing ``why`` reads, and a long streamed call would
    fill the bound before the events after it): at most :data:`EVENTS_SCAN_MAX` kept."""
    out: list[Event] = []
    cursor = 0
    while len(out) < EVENTS_SCAN_MAX:
        page = engine.events(run_id, after=cursor, limit=min(1000, EVENTS_SCAN_MAX - len(out)))
        out.extend(e for e in page.events if e.kind not in _STREAM_TIER)
        if not page.events or page.cursor == cursor:
            break
        cursor = page.cursor
    return out


def step_activity(events: Iterable[Event]) -> StepActivity | None:
    """The latest step the stream shows: started, retried (with the error that caused the
    retry) or finished."""
    act: StepActivity | None = None
    for ev in events:
        kind = ev.kind
        data = ev.data if isinstance(ev.data, dict) else {}
        if kind == ev_kinds.STEP_STARTED:
            act = StepActivity(
                str(ev.position),
                str(data.get("name", "?")),
                _int(data.get("attempt"), 1),
                _int_or_none(data.get("attempts_max")),
            )
        elif kind == ev_kinds.STEP_RETRIED:
            act = StepActivity(
                str(ev.position),
                str(data.get("name", act.name if act else "?")),
                _int(data.get("attempt"), 1) + 1,
                _int_or_none(data.get("attempts_max")),
                _str_or_none(data.get("error_type")),
                _str_or_none(data.get("error_message")),
            )
        elif kind in (ev_kinds.STEP_COMPLETED, ev_kinds.STEP_FAILED) and act is not None:
            act = StepActivity(act.position, act.name, act.attempt, act.attempts_max, finished=True)
    return act


def last_error_of(events: Iterable[Event], history: Sequence[StepRecord]) -> tuple[str, str] | None:
    """The last error type and message in the stream (a failed or retried step, a failed
    run); the history's last failed record when the stream has none."""
    found: tuple[str, str] | None = None
    for ev in events:
        data = ev.data if isinstance(ev.data, dict) else {}
        etype = data.get("error_type")
        if isinstance(etype, str):
            found = (etype, str(data.get("error_message") or ""))
    return found if found is not None else _failed_record_error(history)


def blocked_type(events: Iterable[Event]) -> str | None:
    """The error type of the run's last ``run.blocked`` event, if any."""
    found: str | None = None
    for ev in events:
        if ev.kind == ev_kinds.RUN_BLOCKED and isinstance(ev.data.get("error_type"), str):
            found = ev.data["error_type"]
    return found


def park_kind(events: Iterable[Event]) -> str | None:
    """What the run's last ``run.parked`` event says it waits for (timer, signal,
    approval), if any."""
    found: str | None = None
    for ev in events:
        if ev.kind == ev_kinds.RUN_PARKED:
            kind = ev.data.get("kind")
            found = kind if isinstance(kind, str) else None
    return found


def _failed_record_error(history: Sequence[StepRecord]) -> tuple[str, str] | None:
    failed = [r for r in history if r.status == FAILED and r.error_type]
    if not failed:
        return None
    last = max(failed, key=lambda r: position_key(r.position))
    return (last.error_type or "", last.error_message or "")


def _int(value: object, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


def signal_wait(history: Sequence[StepRecord]) -> tuple[str, float, float | None] | None:
    """``(name, since, deadline)`` of the signal wait in progress, if the last waiting
    record is one (its name is ``wait_for_signal:NAME``, its output the deadline)."""
    found = _last_wait(history, SIGNAL, "deadline")
    if found is None:
        return None
    last, deadline = found
    name = last.name.removeprefix("wait_for_signal:")
    return name, last.started_at, deadline


def approval_wait(
    history: Sequence[StepRecord],
) -> tuple[str, str, str, float, float | None] | None:
    """``(request_id, action, digest, since, expires_at)`` of the approval request in
    progress, if the last waiting record is one (named ``request_approval:ACTION``)."""
    found = _last_wait(history, APPROVAL, "expires_at")
    if found is None:
        return None
    last, expires = found
    action = last.name.removeprefix("request_approval:")
    return last.position, action, last.digest, last.started_at, expires


def _last_wait(
    history: Sequence[StepRecord], kind: str, key: str
) -> tuple[StepRecord, float | None] | None:
    """The last waiting record, if it is of ``kind``, and the time its output holds under
    ``key`` (None when there is none, or the row is damaged: the run's replay blocks on
    it, not the sentence)."""
    waits = [r for r in history if r.status == WAITING]
    last = max(waits, key=lambda r: position_key(r.position), default=None)
    if last is None or last.kind != kind:
        return None
    try:
        value = json.loads(last.output or "null")[key]
    except (ValueError, TypeError, KeyError):
        value = None
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    return last, value if ok else None


def last_record(history: Sequence[StepRecord]) -> StepRecord | None:
    """The record at the history's furthest position, or None for an empty history."""
    return max(history, key=lambda r: position_key(r.position), default=None)
