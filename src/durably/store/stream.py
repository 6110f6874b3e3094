"""The events a store writes with its own status changes, and reading a stream back.

Run and lease events describe a change the store itself makes (a claim, a takeover, a
finish, a park, a requeue), so the store builds them here, the same way for every
backend, and writes them in that change's transaction. Step and user events come from
the replay core with the records they belong to.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..errors import NotADurablyDatabase
from ..events import (
    APPROVAL_DECIDED,
    APPROVAL_REQUESTED,
    LEASE_EXPIRED,
    LEASE_LOST,
    LEASE_TAKEN,
    RUN_BLOCKED,
    RUN_CANCEL_REQUESTED,
    RUN_CANCELLED,
    RUN_COMPLETED,
    RUN_CREATED,
    RUN_FAILED,
    RUN_IN_DOUBT,
    RUN_PARKED,
    RUN_QUARANTINED,
    RUN_RESUMED,
    RUN_STARTED,
    SIGNAL_RECEIVED,
    Event,
    EventPage,
    NewEvent,
    new_event,
)
from ..history import (
    BLOCKED,
    CANCELLED,
    COMPLETED,
    FAILED_RUN,
    IN_DOUBT,
    PARKED,
    TERMINAL,
    RunRecord,
)

if TYPE_CHECKING:
    from ..approvals import ApprovalRequest, ApprovalRow

# The run status a release or finish moves to -> the event it writes.
_STATUS_EVENTS = {
    COMPLETED: RUN_COMPLETED,
    FAILED_RUN: RUN_FAILED,
    BLOCKED: RUN_BLOCKED,
    IN_DOUBT: RUN_IN_DOUBT,
    PARKED: RUN_PARKED,
    CANCELLED: RUN_CANCELLED,
}


def created(workflow: str, queue: str, now: float) -> NewEvent:
    """``run.created`` for a run row just inserted."""
    return new_event(RUN_CREATED, None, {"workflow": workflow, "queue": queue}, now, "created")


def claimed(run: RunRecord, owner: str, lease_s: float, now: float) -> list[NewEvent]:
    """The events of claiming ``run`` (the row as it was before the claim): the previous
    holder's lease expired or lost (a takeover), the lease taken, the run started."""
    token = run.fencing_token + 1
    out = []
    if run.owner is not None:
        expired = run.lease_expires_at is not None and run.lease_expires_at <= now
        kind = LEASE_EXPIRED if expired else LEASE_LOST
        data: dict[str, Any] = {"owner": run.owner, "token": run.fencing_token}
        if expired:
            data["expired_at"] = run.lease_expires_at
        out.append(new_event(kind, None, data, now, f"t{token}:{kind}"))
    taken = {"owner": owner, "token": token, "lease_s": lease_s}
    out.append(new_event(LEASE_TAKEN, None, taken, now, f"t{token}:{LEASE_TAKEN}"))
    started = {"owner": owner, "starts": run.starts + 1}
    out.append(new_event(RUN_STARTED, None, started, now, f"t{token}:{RUN_STARTED}"))
    return out


def quarantined(run: RunRecord, starts: int, now: float) -> NewEvent:
    """``run.quarantined`` for ``run`` (before the change) after ``starts`` starts."""
    dedupe = f"t{run.fencing_token}:{RUN_QUARANTINED}"
    return new_event(RUN_QUARANTINED, None, {"starts": starts}, now, dedupe)


def status_changed(
    status: str | None,
    token: int,
    now: float,
    reason: str | None = None,
    error_type: str | None = None,
    error_message: str | None = None,
    wake_at: float | None = None,
) -> list[NewEvent]:
    """The event of a fenced finish or release that moves the run to ``status`` (none
    for a plain release, which gives the lease back without a new status)."""
    kind = _STATUS_EVENTS.get(status or "")
    if kind is None:
        return []
    data: dict[str, Any] = {
        "reason": reason,
        "error_type": error_type,
        "error_message": error_message,
        "wake_at": wake_at,
    }
    if kind in (RUN_FAILED, RUN_COMPLETED):
        data.pop("reason")
    if kind == RUN_CANCELLED:
        # The reason given to the cancel (a cancelled run records it as its message).
        data = {"reason": error_message}
    return [new_event(kind, None, data, now, f"t{token}:{kind}")]


def cancel_requested(reason: str | None, token: int, now: float) -> NewEvent:
    """``run.cancel_requested`` for a request that set the flag on the run at fencing
    token ``token``: once per request (a request while the flag is set writes nothing).
    Only a retry clears the flag, and it takes a new token, so a cancel asked for after a
    retry is its own event; a write retried after an unknown outcome is not."""
    dedupe = f"t{token}:{RUN_CANCEL_REQUESTED}"
    return new_event(RUN_CANCEL_REQUESTED, None, {"reason": reason}, now, dedupe)


def parked(kind: str, reason: str, wake_at: float | None, token: int, now: float) -> NewEvent:
    """``run.parked`` for a fenced park under ``token``: what the run waits for (``kind``:
    timer, signal, approval), the reason in words, and when it wakes (the effective time:
    at once when a cancel or the awaited signal came first)."""
    data = {"kind": kind, "reason": reason, "wake_at": wake_at}
    return new_event(RUN_PARKED, None, data, now, f"t{token}:{RUN_PARKED}")


def approval_requested(req: ApprovalRequest, now: float) -> NewEvent:
    """``approval.requested`` when a request's row is first written (its arguments stay
    out of the stream: they may hold personal data; ``durably approvals list`` shows them)."""
    data: dict[str, Any] = {
        "request_id": req.request_id,
        "action": req.action,
        "digest": req.digest,
    }
    if req.expires_at is not None:
        data["expires_at"] = req.expires_at
    dedupe = f"{APPROVAL_REQUESTED}:{req.request_id}"
    return new_event(APPROVAL_REQUESTED, req.request_id, data, now, dedupe)


def approval_decided(row: ApprovalRow, now: float) -> NewEvent:
    """``approval.decided`` for a request's one decision (approved, rejected, expired)."""
    data: dict[str, Any] = {"request_id": row.request_id, "outcome": row.outcome}
    if row.by is not None:
        data["by"] = row.by
    dedupe = f"{APPROVAL_DECIDED}:{row.request_id}"
    return new_event(APPROVAL_DECIDED, row.request_id, data, now, dedupe)


def resumed(run: RunRecord, skipped: bool, now: float) -> NewEvent:
    """``run.resumed`` for an operator's requeue of ``run`` (before the change)."""
    data = {"previous": run.status, "reason": "skip" if skipped else "retry"}
    return new_event(RUN_RESUMED, None, data, now, f"t{run.fencing_token + 1}:{RUN_RESUMED}")


def signal_dedupe(send: str | None) -> str:
    """The dedupe of a send's ``signal.received`` event: ``send`` names the send (the
    same on every retry of it); None draws a fresh name (a send no caller retries)."""
    if send is None:
        import uuid

        send = uuid.uuid4().hex
    return f"signal:{send}"


def signal_received(name: str, seq: int, now: float, dedupe: str) -> NewEvent:
    """``signal.received`` for signal ``seq`` of the run (its data stays out: it may hold
    secrets, and the stream is read by dashboards and followers)."""
    return new_event(SIGNAL_RECEIVED, None, {"name": name, "seq": seq}, now, dedupe)


def sent_seq(data: str) -> int:
    """The signal number a stored ``signal.received`` event names."""
    try:
        seq = json.loads(data)["seq"]
        if isinstance(seq, int) and not isinstance(seq, bool):
            return seq
    except (ValueError, TypeError, KeyError):
        pass
    raise NotADurablyDatabase(
        f"a signal.received event holds no signal number ({data[:200]!r}); restore the"
        " journal from a backup, or delete that event row"
    )


def page(
    run_id: str, status: str, rows: Sequence[Sequence[Any]], after: int, limit: int
) -> EventPage:
    """An :class:`EventPage` from ``(cursor, kind, position, at, data)`` rows read after
    the run's ``status`` (read first: a terminal status read before the events means
    every event of the finished run is among them or before ``after``)."""
    events = [_event(run_id, row) for row in rows]
    cursor = events[-1].cursor if events else after
    finished = status in TERMINAL and len(events) < limit
    return EventPage(events, cursor, finished)


def _event(run_id: str, row: Sequence[Any]) -> Event:
    """One row checked on the way out: a hand-edited row must not crash a follower."""
    cursor, kind, position, at, data = row
    try:
        decoded = json.loads(data)
        ok = (
            isinstance(cursor, int)
            and isinstance(kind, str)
            and (position is None or isinstance(position, str))
            and isinstance(at, (int, float))
            and isinstance(decoded, dict)
        )
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise NotADurablyDatabase(
            f"run {run_id!r} has a corrupt event at cursor {cursor!r}; restore the journal"
            " from a backup, or delete that event row"
        )
    return Event(run_id, cursor, kind, position, float(at), decoded)
