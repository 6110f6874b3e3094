"""Human approvals (``ctx.request_approval``): an ``approval`` record at the request's
position, ``waiting`` while the run waits (its ``approvals`` row written with the park),
then ``ok`` with the decision it took; the decision is read from the store by a
:class:`ReadDecision` operation. The request and decision types, which the stores
also use, are in :mod:`durably.approvals`.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any, TypeVar

from ..approvals import (
    APPROVAL_NAME_PREFIX,
    EXPIRED,
    ApprovalRequest,
    Decision,
    approval_park_reason,
    args_json,
    canonical_args,
    check_action,
    check_on_timeout,
    decision_json,
    recorded_decision,
    waiting_json,
    waiting_times,
)
from ..errors import Cancelled, ConfigError, NonDeterminism, SerializationError
from ..journal.records import APPROVAL, OK, WAITING, StepRecord
from ..limits import APPROVALS_PENDING_MAX
from ..replay import stepping
from ..replay.ops import Op, ReadDecision
from ..replay.park import Parked

if TYPE_CHECKING:
    from ..replay.kernel import RunCore


def request_approval(
    core: RunCore, action: Any, args: Any, timeout_s: Any, on_timeout: Any
) -> Generator[Op, Any, Decision]:
    """``ctx.request_approval(action, args, timeout_s=, on_timeout=)`` at the next
    position p (see ``Context.request_approval``).

    Recorded ``ok`` at p: the recorded decision, with no I/O. Nothing recorded: a
    ``waiting`` record (requested_at, expires_at) goes with the park, which writes the
    request's ``approvals`` row, and the run parks. ``waiting``: the store is asked
    for the decision (a :class:`ReadDecision`; it takes the expiry itself when due),
    recorded ``ok`` at p when there is one, else the run parks again. An expiry then
    takes the ``on_timeout`` branch, the same on every replay.
    """
    core.guard()
    core.check_dropped()
    try:
        action = check_action(action)
        check_on_timeout(action, timeout_s, on_timeout)
        args_text = canonical_args(action, args)
    except ConfigError as exc:
        raise core.poison(exc) from None
    digest = hashlib.sha256(args_text.encode("utf-8")).hexdigest()
    pos = core.take()
    rname = f"{APPROVAL_NAME_PREFIX}{action}"
    rec = core.recorded(pos, APPROVAL, rname, digest)
    if rec is not None and rec.status == OK:
        decision = _read_record(core, rec, recorded_decision)
    else:
        core.live(pos)  # nothing recorded, or a wait in progress: it goes on live
        decision = yield from _await_decision(core, pos, rec, action, args, digest, timeout_s)
    if decision.outcome != EXPIRED or on_timeout == "reject":
        return decision
    if on_timeout == "cancel":
        _cancel_on_expiry(core, pos, action)
        return decision  # only inside a saga's compensation: the halt waits
    value = yield from stepping.step(core, f"on_timeout:{action}", on_timeout, (), {})
    expired: Decision = dataclasses.replace(decision, value=value)
    return expired


def _await_decision(
    core: RunCore,
    pos: str,
    rec: StepRecord | None,
    action: str,
    args: Any,
    digest: str,
    timeout_s: float | None,
) -> Generator[Op, Any, Decision]:
    """The live part of a request: park on it, or record the decision it got."""
    rname = f"{APPROVAL_NAME_PREFIX}{action}"
    held: tuple[StepRecord, ...] = ()
    if rec is None:
        requested = core.clock.time()
        expires = None if timeout_s is None else requested + float(timeout_s)
        text = waiting_json(requested, expires)
        # Held for the park (see ``park``), never in ``pending``: in a gather branch
        # the siblings go on writing, and this record riding with one of their writes
        # (the park then never coming: a crash, a sibling's failure caught by the
        # workflow) would leave a request with no approvals row, blocking the replay.
        held = (StepRecord(pos, APPROVAL, rname, digest, WAITING, text, started_at=requested),)
    else:
        requested, expires = _read_record(core, rec, waiting_times)
    # The request id is the position, with the generation in generation N >= 1
    # (``g2.3``): positions start again at 0 there, request ids never repeat.
    req_id = f"{core.gen}{pos}"
    req = ApprovalRequest(req_id, action, args_json(args), digest, requested, expires)
    if rec is not None:
        # The driver may run other code while the store answers (an async retry's
        # pause): the scope is busy, so concurrent use of it is caught as for a step.
        scope = core.scope()
        scope.busy = f"approval request {pos} {rname!r}"
        try:
            row = yield ReadDecision(req_id)
        finally:
            scope.busy = None
        if row is None:
            # Written with the request's park, in one transaction: only a hand-edited
            # journal lacks it. Nobody could decide the request, so the run is blocked.
            raise core.poison(
                SerializationError(
                    f"position {pos} {rname!r}: the run waits on approval request {req_id},"
                    " but the approvals table has no row for it (deleted by hand?); the"
                    " run is blocked until the row is restored from a backup"
                )
            )
        if row.digest != digest:
            # Written with this record's digest, in one transaction: only a hand edit
            # makes them differ, and a decision taken on the row's action and
            # arguments must not be carried over to this one.
            raise core.poison(
                SerializationError(
                    f"position {pos} {rname!r}: the run waits on approval request {req_id}"
                    f" with digest {digest[:12]}..., but its approvals row holds digest"
                    f" {row.digest[:12]}... (action {row.action!r:.80}); the row was"
                    " edited by hand, so no decision on it is taken and the run is"
                    " blocked until the row is restored from a backup"
                )
            )
        if row.outcome is not None:
            decision: Decision = row.decision()
            core.record_marker(pos, APPROVAL, rname, digest, decision_json(row), since=requested)
            return decision
    gathers = core.gathers
    if gathers.approvals_waiting >= APPROVALS_PENDING_MAX:
        # Only gather branches wait on several at once (a top-level request parks the
        # run): past the bound, a person could not review them anyway.
        raise core.poison(
            ConfigError(
                f"ctx.request_approval({action!r}) at position {pos}: the run already waits"
                f" on {APPROVALS_PENDING_MAX:,} approval requests at once (gather branches"
                " each asking), the most one run may have pending; ask for one approval"
                " covering the batch instead. The run is blocked; fix the code, then"
                " resume it."
            )
        )
    gathers.approvals_waiting += 1
    why = approval_park_reason(action, digest, requested, expires)
    raise core.park(Parked(APPROVAL, expires, detail=why, approval=req, records=held))


def _cancel_on_expiry(core: RunCore, pos: str, action: str) -> None:
    """``on_timeout="cancel"``: the run is cancelled at the next position (a halt
    marker recorded there, or replayed from there), so the cancel latch applies."""
    core.request_halt(
        Cancelled(
            f"run {core.run_id!r}: approval request {pos} ({action!r}) expired and its"
            " on_timeout is 'cancel', so the run is cancelled",
            f"approval {action!r} expired",
        )
    )
    nxt = core.take()  # a halt recorded there is raised by take
    if nxt in core.history:
        raise core.poison(
            NonDeterminism(
                f"step {nxt}: history has {core.history[nxt].name!r} after approval"
                f" request {pos} expired, where on_timeout='cancel' cancels the run; the"
                " code no longer matches this run's history and the run is blocked"
            )
        )
    core.live(nxt)


T_ = TypeVar("T_")


def _read_record(core: RunCore, rec: StepRecord, read: Callable[[str | None], T_]) -> T_:
    """``read(rec.output)`` (an approval record's contents); a damaged row blocks the run."""
    try:
        return read(rec.output)
    except SerializationError as exc:
        raise core.poison(
            SerializationError(
                f"position {rec.position} {rec.name!r}: {exc}; the run is blocked until the"
                " row is repaired"
            )
        ) from None
