"""The approvals role, written once: list, read and decide requests, and the driver's
fenced read of a decision (over the :mod:`.tx` protocol). Parking on a request is the
``park`` of each backend."""

from __future__ import annotations

import dataclasses
import logging

from ..approvals import ApprovalRow
from ..errors import LeaseLost, NotADurablyDatabase
from . import stream
from .base import APPROVALS_LIST_MAX
from .rules import approval_row, check_decidable
from .tx import Backend, Tx

log = logging.getLogger("durably")


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
