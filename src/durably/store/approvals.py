"""The approvals role, written once: list, read and decide requests, and the driver's
fenced read of a decision (over the :mod:`.tx` protocol). Parking on a request is the
``park`` of each backend."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .._log import LazyLogger
from ..errors import (
    ApprovalAlreadyDecided,
    ApprovalMismatch,
    ApprovalNotFound,
    LeaseLost,
    NotADurablyDatabase,
    RunFinished,
    RunNotFound,
)
from ..history import TERMINAL
from ..shell import command
from . import stream
from .base import APPROVALS_LIST_MAX
from .tx import Backend, Tx

if TYPE_CHECKING:
    from ..approvals import ApprovalRow

log = LazyLogger("durably")


class Approvals(Backend):
    """Store methods of the approvals role (see :class:`~durably.store.base.Store`)."""

    def pending_approvals(
        self, run_id: str | None = None, limit: int = APPROVALS_LIST_MAX
    ) -> list[ApprovalRow]:
        """Undecided requests of runs not finished, oldest first (see the Store protocol).

        A row that fails its check on the way out (edited by hand) is left out with a
        warning on the ``durably`` logger naming it: one damaged row must not hide every
        other run's requests from the people who decide them (its own run meets the
        error when it reads its decision)."""
        rows = self._reading(
            lambda tx: tx.q("pending_approvals", run_id=run_id, limit=limit).fetchall()
        )
        out = []
        for r in rows:
            try:
                out.append(approval_row(r))
            except NotADurablyDatabase as exc:
                log.warning("an approval request is left out of the pending list: %s", exc)
        return out

    def get_approval(self, run_id: str, request_id: str) -> ApprovalRow | None:
        """The request at ``request_id`` of the run, or None."""
        row = self._reading(lambda tx: tx.one("get_approval", run_id=run_id, request_id=request_id))
        return None if row is None else approval_row(row)

    def decide_approval(
        self,
        run_id: str,
        request_id: str,
        *,
        digest: str,
        outcome: str,
        by: str | None,
        note: str | None,
    ) -> ApprovalRow:
        """A person's decision, checked and written under the run's lock in one
        transaction (see the Store protocol)."""
        now = self.clock.time()
        key = {"run_id": run_id, "request_id": request_id}

        def op(tx: Tx) -> ApprovalRow:
            run = tx.one("lock_run_status", **key)
            found = tx.one("get_approval", **key)
            row = None if found is None else approval_row(found)
            if tx.retried and row is not None and same_decision(row, digest, outcome, by, note):
                # The first attempt committed before its connection died: done. (Its
                # digest was checked then; a decision of the same words by someone
                # else, named by another digest, is not this one: checked below.)
                return row
            row = check_decidable(
                run_id,
                request_id,
                None if run is None else run[0],
                row,
                digest,
                now,
                self._where,
                cancelling=run is not None and bool(run[1]),
            )
            tx.q("decide_approval", **key, outcome=outcome, by=by, note=note, now=now)
            # Here, not at the top: a row is a durably.approvals dataclass (so the module
            # is loaded by now), and a resume that decides nothing never imports it.
            import dataclasses

            decided = dataclasses.replace(row, outcome=outcome, by=by, note=note, decided_at=now)
            tx.events(run_id, [stream.approval_decided(decided, now)])
            # Wakes the run parked on it (and, on PostgreSQL, the workers, in the query).
            tx.q("wake_for_approval", **key, now=now).fetchall()
            return decided

        return self._writing(op)

    def approval_decision(self, run_id: str, token: int, request_id: str) -> ApprovalRow | None:
        """The request's row for its driver, expired first when due (fenced; see the Store
        protocol)."""
        now = self.clock.time()
        key = {"run_id": run_id, "request_id": request_id}

        def op(tx: Tx) -> ApprovalRow | None:
            if tx.scalar("lock_token", **key) != token:
                raise LeaseLost(run_id, token)
            expired = tx.q("expire_approval", **key, now=now).rowcount
            found = tx.one("get_approval", **key)
            row = None if found is None else approval_row(found)
            if expired == 1 and row is not None:
                tx.events(run_id, [stream.approval_decided(row, now)])
            return row

        return self._writing(op)


def same_decision(
    row: ApprovalRow, digest: str, outcome: str, by: str | None, note: str | None
) -> bool:
    """Whether ``row`` holds exactly this decision, named by this digest (a retried
    decide whose first attempt committed)."""
    return row.digest == digest and (row.outcome, row.by, row.note) == (outcome, by, note)


def approval_row(row: Sequence[Any]) -> ApprovalRow:
    """An ``approvals`` row (run_id, request_id, action, args, digest, requested_at,
    expires_at, decided_at, outcome, by_name, note: every approvals query selects them in
    this order), checked on the way out: an outcome the code does not know, or a time
    that is none (SQLite keeps text in a REAL column), is a damaged row."""
    # The approvals room loads with the first approval read: a run that asks for none
    # (and a resume of it) never imports it (issue 28).
    from ..approvals import OUTCOMES, ApprovalRow, is_time

    try:
        out = ApprovalRow(
            str(row[0]),
            str(row[1]),
            str(row[2]),
            str(row[3]),
            str(row[4]),
            float(row[5]),
            None if row[6] is None else float(row[6]),
            None if row[7] is None else float(row[7]),
            None if row[8] is None else str(row[8]),
            None if row[9] is None else str(row[9]),
            None if row[10] is None else str(row[10]),
        )
    except (TypeError, ValueError) as exc:
        raise NotADurablyDatabase(
            f"run {str(row[0])[:200]!r} approval {str(row[1])[:200]}: a time of the row is"
            f" no time ({exc}); the row was edited by hand: repair it or restore a backup"
        ) from None
    times = (out.requested_at, out.expires_at, out.decided_at)
    if not all(t is None or is_time(t) for t in times):
        raise NotADurablyDatabase(
            f"run {out.run_id!r} approval {out.request_id}: a time of the row is no time"
            f" ({times!r}); the row was edited by hand: repair it or restore a backup"
        )
    if out.outcome is not None and (out.outcome not in OUTCOMES or out.decided_at is None):
        raise NotADurablyDatabase(
            f"run {out.run_id!r} approval {out.request_id}: outcome {out.outcome!r} (decided"
            f" at {out.decided_at!r}) is not one durably writes; the row was edited by hand"
        )
    return out


def check_decidable(
    run_id: str,
    request_id: str,
    status: str | None,
    row: ApprovalRow | None,
    digest: str,
    now: float,
    where: str,
    *,
    cancelling: bool = False,
) -> ApprovalRow:
    """Raise unless a person may decide the request ``row`` of a run with ``status``
    (None: no such run) naming ``digest``; return the row. The order matters: an unknown
    run or request says so before anything about digests, and a wrong digest is refused
    before saying whether the request was decided (it names another action).
    ``cancelling``: a cancel was asked for, so the run unwinds at its next wake and never
    uses a decision (accepting one would tell the person it was approved)."""
    from ..approvals import EXPIRED

    if status is None:
        raise RunNotFound(
            f"no run {run_id!r} in {where}; nothing was decided. `durably approvals list`"
            " shows the requests waiting"
        )
    if row is None:
        raise ApprovalNotFound(
            f"run {run_id!r} has no approval request {request_id!r} (a request id is the"
            " request's position, e.g. '3'); nothing was decided. `durably approvals list"
            " --json` shows the requests waiting"
        )
    if digest != row.digest:
        shown = digest if len(digest) <= 16 else f"{digest[:12]}..."
        hint = (
            " (the API takes the full 64-hex digest; the CLI takes a prefix)"
            if len(digest) != len(row.digest)
            else " (digests are lowercase hex: pass it as listed)"
            if digest.lower() == row.digest
            else ""
        )
        # A prefix or an upper-case copy of the right digest names the right request in
        # the wrong form: saying it names another action would send the person hunting.
        what = (
            "the digest is not given as the request's full lowercase digest"
            if row.digest.startswith(digest.lower())
            else "the decision names another action or other arguments"
        )
        raise ApprovalMismatch(
            f"run {run_id!r} request {request_id} is for {row.action!r} with digest"
            f" {row.digest[:12]}..., not {shown!r}{hint}: {what}, so it was refused and"
            " nothing changed. Read the request again (`durably approvals list`) and decide"
            " on what it shows"
        )
    if not row.shows_its_digest():
        raise NotADurablyDatabase(
            f"run {run_id!r} request {request_id}: the action and arguments of its approvals"
            f" row do not hash to its digest {row.digest[:12]}...: the row was edited by hand,"
            " so what it shows is not what the run asked for. Nothing was decided; restore"
            " the row from a backup"
        )
    if row.outcome is not None:
        raise ApprovalAlreadyDecided(run_id, request_id, row.outcome, row.by, row.decided_at)
    if row.expires_at is not None and now >= row.expires_at:
        # The run takes the expiry when it wakes (due at expires_at): too late to decide.
        raise ApprovalAlreadyDecided(run_id, request_id, EXPIRED, None, row.expires_at)
    if status in TERMINAL:
        raise RunFinished(
            f"run {run_id!r} is already {status}, so nothing waits for request"
            f" {request_id} any more; nothing was decided"
        )
    if cancelling:
        raise RunFinished(
            f"run {run_id!r} is being cancelled (a cancel was asked for), so it will not"
            f" act on request {request_id}: nothing was decided."
            f" `{command('runs why', run_id)}` says when it ends"
        )
    return row
