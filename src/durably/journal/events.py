"""The run's event stream: the one table of event kinds, and the types readers get.

Every run has an append-only stream of typed events. Each event carries a per-run
``cursor`` (1, 2, 3, ... in commit order, assigned under the run's row lock), so a
reader that remembers the last cursor it saw and asks again with ``after=cursor`` sees
no gap and no repeat, whichever process wrote the events and whenever it reconnects.

Two durability tiers (DESIGN "Durability tiers"): events that describe a durable write
(a step completed or failed, a run status change, a lease claim) commit in the same
transaction as that write, so committed state and committed events always agree.
Stream-only events (``step.started``, ``user``) ride with the next durable write and
never cost an fsync of their own; a streamed model call's ``model.delta`` and
``model.restart`` are written at once by the store's stream writer, on its own
connection and off the fsync path. A SIGKILL may lose an unwritten stream-only event,
never a committed one.

This module is pure (no I/O) and cheap to import; :class:`Follow`, the live read, lives
in :mod:`durably.events`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from ..limits import EVENT_DATA_BYTES_MAX as EVENT_DATA_BYTES_MAX

RUN_CREATED: Final = "run.created"
RUN_STARTED: Final = "run.started"
RUN_PARKED: Final = "run.parked"
RUN_RESUMED: Final = "run.resumed"
RUN_COMPLETED: Final = "run.completed"
RUN_FAILED: Final = "run.failed"
RUN_CANCELLED: Final = "run.cancelled"
RUN_CANCEL_REQUESTED: Final = "run.cancel_requested"
RUN_BLOCKED: Final = "run.blocked"
RUN_QUARANTINED: Final = "run.quarantined"
RUN_IN_DOUBT: Final = "run.in_doubt"
RUN_HISTORY_WARNING: Final = "run.history_warning"
RUN_CONTINUED: Final = "run.continued"
STEP_STARTED: Final = "step.started"
STEP_COMPLETED: Final = "step.completed"
STEP_FAILED: Final = "step.failed"
STEP_RETRIED: Final = "step.retried"
LEASE_TAKEN: Final = "lease.taken"
LEASE_LOST: Final = "lease.lost"
LEASE_EXPIRED: Final = "lease.expired"
SIGNAL_RECEIVED: Final = "signal.received"
APPROVAL_REQUESTED: Final = "approval.requested"
APPROVAL_DECIDED: Final = "approval.decided"
USER: Final = "user"
MODEL_DELTA: Final = "model.delta"
MODEL_RESTART: Final = "model.restart"


@dataclass(frozen=True)
class EventKind:
    """One row of the event table: a kind, what it means, and its JSON data fields.

    ``fields`` maps each data field to a one-line description; a field marked "(if
    any)" may be absent. ``stream_only`` kinds never cost an fsync of their own and may
    be lost by a SIGKILL before the next durable write; every other kind commits with
    the write it describes.
    """

    kind: str
    meaning: str
    fields: Mapping[str, str] = field(default_factory=dict)
    stream_only: bool = False


#: The one table of event kinds. docs/events.md shows the same table (a test compares).
EVENT_KINDS: Final[tuple[EventKind, ...]] = (
    EventKind(
        RUN_CREATED,
        "the run was created (queued, or about to run in the creating process)",
        {"workflow": "the workflow's name", "queue": "its queue"},
    ),
    EventKind(
        RUN_STARTED,
        "a process claimed the run and starts (or resumes) executing it",
        {"owner": "the claiming process (worker, pid, host)", "starts": "starts so far"},
    ),
    EventKind(
        RUN_PARKED,
        "the run gave up its process to wait (a timer, a signal, an approval)",
        {
            "kind": "timer, signal, approval, or waits (several at once: gather branches)",
            "reason": "what it waits for",
            "wake_at": "when it wakes (if timed)",
        },
    ),
    EventKind(
        RUN_RESUMED,
        "the run was queued again after it stopped: an operator's retry or skip",
        {"previous": "the status it left", "reason": "retry or skip"},
    ),
    EventKind(RUN_COMPLETED, "the run finished and its result was recorded", {}),
    EventKind(
        RUN_FAILED,
        "the run failed (the workflow raised)",
        {"error_type": "the exception type", "error_message": "its message"},
    ),
    EventKind(
        RUN_CANCEL_REQUESTED,
        "a cancel was asked for (engine.cancel): the workflow unwinds at its next step;"
        " one per request that set the flag (a cancel asked for after a retry cleared it"
        " is another)",
        {"reason": "the reason given (if any)"},
    ),
    EventKind(
        RUN_CANCELLED,
        "the run ended cancelled (it unwound, or a cancel ended it at once)",
        {"reason": "the reason given to the cancel (if any)"},
    ),
    EventKind(
        RUN_BLOCKED,
        "the run stopped for a person: the code no longer matches its history, or data"
        " cannot be stored or decoded",
        {
            "reason": "what is wrong and what to do",
            "error_type": "what blocked it: NonDeterminism, SerializationError, ConfigError"
            " (if any)",
        },
    ),
    EventKind(
        RUN_QUARANTINED,
        "the run was started too often without progress and is no longer claimed",
        {"starts": "starts without progress"},
    ),
    EventKind(
        RUN_IN_DOUBT,
        "an effect may or may not have happened, and nothing can tell which",
        {"reason": "which step, and what to do"},
    ),
    EventKind(
        RUN_HISTORY_WARNING,
        "the run's current generation passed history_warn (once per generation; rides"
        " with the next write): continue as new before it reaches history_max",
        {
            "generation": "the generation",
            "records": "records it holds",
            "bytes": "UTF-8 bytes of stored text its records hold",
            "warn_records": "the warning's records bound",
            "warn_bytes": "the warning's bytes bound",
            "max_records": "history_max's records bound (if any)",
            "max_bytes": "history_max's bytes bound (if any)",
        },
    ),
    EventKind(
        RUN_CONTINUED,
        "ctx.continue_as_new ended a generation (its status: continued) and started the"
        " next, in one transaction; the run goes on",
        {
            "generation": "the new generation",
            "records": "records the finished generation holds",
        },
    ),
    EventKind(
        STEP_STARTED,
        "a step began executing (stream-only: rides with the next durable write)",
        {
            "name": "the step's name",
            "attempt": "the execution number, from 1 (crashed executions count)",
            "key": "the step's idempotency key",
        },
        stream_only=True,
    ),
    EventKind(
        STEP_COMPLETED,
        "a step's result was recorded",
        {
            "name": "the step's name",
            "attempt": "executions it took",
            "duration_ms": "milliseconds from its start to its result",
            "key": "the step's idempotency key",
            "tokens": "tokens it reported (if any)",
            "cost_usd": "cost it reported (if any)",
            "input_tokens": "input tokens it reported (when given to durably.usage)",
            "output_tokens": "output tokens it reported (when given to durably.usage)",
        },
    ),
    EventKind(
        STEP_FAILED,
        "a step's final failure was recorded",
        {
            "name": "the step's name",
            "attempt": "executions it took",
            "duration_ms": "milliseconds from its start to its failure",
            "key": "the step's idempotency key",
            "error_type": "the exception type",
            "error_message": "its message",
        },
    ),
    EventKind(
        STEP_RETRIED,
        "a step attempt failed and will be retried (committed at once, before the backoff)",
        {
            "name": "the step's name",
            "attempt": "the attempt that failed",
            "error_type": "the exception type",
            "error_message": "its message",
            "delay_s": "seconds until the next attempt",
            "attempts_max": "the last attempt the step may make (its retries + 1, after"
            " crashed executions)",
        },
    ),
    EventKind(
        LEASE_TAKEN,
        "a process took the run's lease",
        {"owner": "the new holder", "token": "its fencing token", "lease_s": "lease length"},
    ),
    EventKind(
        LEASE_LOST,
        "the previous holder was judged gone before its lease ran out (written by the taker)",
        {"owner": "the previous holder", "token": "its fencing token"},
    ),
    EventKind(
        LEASE_EXPIRED,
        "the previous holder's lease ran out (written by whoever takes over)",
        {"owner": "the previous holder", "token": "its fencing token", "expired_at": "when"},
    ),
    EventKind(
        SIGNAL_RECEIVED,
        "engine.signal (or `durably signal`) sent the run a signal; its data is not in the"
        " event (it may hold secrets)",
        {"name": "the signal's name", "seq": "its per-run sequence number, from 1"},
    ),
    EventKind(
        APPROVAL_REQUESTED,
        "the run parked on an approval request (ctx.request_approval)",
        {
            "request_id": "the request's position",
            "action": "what is to be approved",
            "digest": "sha256 of [action, args] a decision must name",
            "expires_at": "when it expires (if any)",
        },
    ),
    EventKind(
        APPROVAL_DECIDED,
        "an approval request was approved, rejected, or expired",
        {
            "request_id": "the request's position",
            "outcome": "approved, rejected or expired",
            "by": "who decided (if any)",
        },
    ),
    EventKind(
        USER,
        "ctx.emit(kind, data): attached to the current position, once, even under replay",
        {"kind": "the caller's kind", "data": "the caller's JSON data"},
        stream_only=True,
    ),
    EventKind(
        MODEL_RESTART,
        "a streamed model call's attempt begins sending deltas: readers drop the call's"
        " earlier deltas (written at once by the stream writer, never fsync'd)",
        {
            "name": "the step's name",
            "attempt": "the execution number, from 1 (crashed executions count)",
            "token": "the fencing token of the process streaming",
        },
        stream_only=True,
    ),
    EventKind(
        MODEL_DELTA,
        "a piece of a streamed model call as it arrived, before the call is recorded"
        " (written at once by the stream writer, never fsync'd)",
        {
            "text": "the text fragment (if any)",
            "tool": "which tool call the fragment belongs to, by its index (if any)",
            "name": "the tool's name, on the tool call's first fragment (if any)",
            "arguments": "the tool call's argument fragment, JSON text in pieces (if any)",
            "choice": "the choice it belongs to when a call asked for several (if any)",
            "attempt": "the execution number of its series",
            "token": "the fencing token of its series",
            "index": "its place in the series, from 0",
        },
        stream_only=True,
    ),
)

#: Kinds that never cost an fsync of their own.
STREAM_ONLY_KINDS: Final = frozenset(k.kind for k in EVENT_KINDS if k.stream_only)


@dataclass(frozen=True)
class Event:
    """One event of a run's stream.

    ``cursor`` is the event's place in its run's stream (1, 2, 3, ... in commit order);
    pass the last cursor you saw as ``after`` to read on without gap or repeat.
    ``position`` is the journal position the event belongs to (None for run and lease
    events); ``at`` is the wall-clock time it was recorded (seconds since the epoch).
    """

    run_id: str
    cursor: int
    kind: str
    position: str | None
    at: float
    data: dict[str, Any]


@dataclass(frozen=True)
class EventPage:
    """One read of a run's stream: the events, the cursor to read on from, and whether
    the stream is finished.

    ``cursor`` is the value to pass as ``after`` next (the last event's cursor, or the
    ``after`` you passed when no event followed it). ``finished`` is True when the run
    was terminal when read and every event up to that point is in this page: nothing
    more will follow.
    """

    events: list[Event]
    cursor: int
    finished: bool


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event on its way into a run's stream; the store gives it its cursor.

    ``data`` is canonical JSON text. ``dedupe`` names this occurrence of the event within
    its run (for example ``emit:3:0`` for the first emit at position 3, or ``t7:3:step.completed``
    for a step result recorded under fencing token 7): a write repeated after an unknown
    commit outcome, or an emit replayed after a crash, is stored once.
    """

    kind: str
    position: str | None
    data: str
    at: float
    dedupe: str


def new_event(
    kind: str, position: str | None, data: Mapping[str, Any], at: float, dedupe: str
) -> NewEvent:
    """A :class:`NewEvent` with ``data`` encoded as canonical JSON (None values left out,
    so "(if any)" fields are simply absent)."""
    dumps = _DUMPS[0] if _DUMPS else _load_dumps()
    clean = {k: v for k, v in data.items() if v is not None}
    return NewEvent(kind, position, dumps(clean, f"event {kind}"), at, dedupe)


# codec.dumps, imported at the first event (codec is imported by every writer anyway, and
# readers of events need none of it); kept here, as an import statement inside
# new_event costs every event a trip through the import machinery.
_DUMPS: list[Any] = []


def _load_dumps() -> Any:
    from . import codec

    _DUMPS.append(codec.dumps)
    return codec.dumps
