"""The history role, written once over the :mod:`.tx` protocol: a generation's records
and blobs, ``finish`` and ``park``.

Writing a step's records stays each backend's own, behind the named hook
``_append_records`` (and ``append``, the step path, tuned per dialect: one autocommit
statement on SQLite, one round trip for a record and its events on PostgreSQL). Where
``park``'s lock order differs it is the named hook ``_lock_for_park``: PostgreSQL takes
the run row's lock (``lock_token``) in a statement of its own before anything else, so
a signal, decision or cancel that held the row commits first and ``park_run``'s fresh
snapshot sees it; SQLite's ``BEGIN IMMEDIATE`` has held the one writer lock from the
start. Never unify the two by accident.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..approvals import ApprovalRequest
from ..errors import LeaseLost, NotADurablyDatabase
from ..events import NewEvent
from ..history import CorruptRecord, StepRecord
from . import stream
from .rules import approval_params, blobs_from_rows, park_waits
from .tx import Backend, Tx


class History(Backend):
    """Store methods of the history role (see :class:`~durably.store.base.Store`)."""

    def load_history(self, run_id: str, generation: int) -> list[StepRecord]:
        """All records of one generation, in one query, checked on the way out."""
        rows = self._reading(
            lambda tx: tx.q("load_history", run_id=run_id, generation=generation).fetchall()
        )
        try:
            return [StepRecord(*r).check() for r in rows]
        except CorruptRecord as exc:
            raise NotADurablyDatabase(
                f"{self._where}: run {run_id!r} has a corrupt history record ({exc}); restore"
                " it from a backup"
            ) from exc

    def get_blobs(self, digests: Sequence[str]) -> dict[str, str]:
        """The stored blobs among ``digests``, as text by digest (missing ones left out)."""
        rows = self._reading(
            lambda tx: tx.q("get_blobs", digests=tx.array(list(digests))).fetchall()
        )
        return blobs_from_rows(rows)

    def _append_records(
        self, tx: Tx, run_id: str, token: int, records: Sequence[StepRecord]
    ) -> bool:
        """Upsert ``records`` (fenced) in the open transaction, their blobs first; returns
        whether a cancel was asked for. Raises ``LeaseLost`` on a stale token, or a
        ``StoreError`` when another result is stored at a position (one stored equal is
        this very write, retried after an unknown commit: success)."""
        raise NotImplementedError

    def finish(
        self,
        run_id: str,
        token: int,
        status: str,
        records: Sequence[StepRecord],
        outcome: str | None = None,
        error_type: str | None = None,
        error_message: str | None = None,
        park_reason: str | None = None,
        events: Sequence[NewEvent] = (),
    ) -> None:
        """Write the last records, ``events`` and the outcome (with its event) in one
        fenced transaction. A finished run frees a slot of its queue: PostgreSQL's
        finish_run wakes waiting workers."""
        now = self.clock.time()
        changed = [
            *events,
            *stream.status_changed(status, token, now, park_reason, error_type, error_message),
        ]
        params = {
            "run_id": run_id,
            "token": token,
            "status": status,
            "outcome": outcome,
            "error_type": error_type,
            "error_message": error_message,
            "park_reason": park_reason,
            "finished_at": now,
            "now": now,
        }

        def op(tx: Tx) -> None:
            self._append_records(tx, run_id, token, records)
            # Re-running this update on a retry is harmless: the token is unchanged by
            # it, so it matches again and writes the same values.
            if tx.q("finish_run", **params).rowcount != 1:
                raise LeaseLost(run_id, token)
            tx.events(run_id, changed)

        self._writing(op)

    def _lock_for_park(self, tx: Tx, run_id: str, token: int) -> None:
        """Take the run's lock for a park, first thing in its transaction; raises
        ``LeaseLost`` when ``token`` is stale (see the module docstring)."""
        raise NotImplementedError

    def park(
        self,
        run_id: str,
        token: int,
        records: Sequence[StepRecord],
        events: Sequence[NewEvent] = (),
        *,
        kind: str,
        park_reason: str,
        wake_at: float | None,
        wait_signals: Sequence[str] = (),
        approvals: Sequence[ApprovalRequest] = (),
    ) -> float | None:
        """Write ``records`` and park the run in one fenced transaction; returns the
        effective wake time (see the Store protocol). A run due at once wakes waiting
        workers at commit."""
        now = self.clock.time()
        waits, requests = park_waits(wait_signals, approvals)
        params = {
            "run_id": run_id,
            "token": token,
            "park_reason": park_reason,
            "wake_at": wake_at,
            **waits,
            "now": now,
        }

        def op(tx: Tx) -> float | None:
            self._lock_for_park(tx, run_id, token)
            self._append_records(tx, run_id, token, records)
            asked: list[NewEvent] = []
            for req in requests:
                put = tx.q("put_approval", **approval_params(run_id, req))
                if put.rowcount == 1:  # the first park on it (a replay's keeps the row)
                    asked.append(stream.approval_requested(req, now))
            # fetchall: a RETURNING statement left unfinished keeps SQLite from committing.
            rows = tx.q("park_run", **params).fetchall()
            if not rows:
                raise LeaseLost(run_id, token)
            effective: float | None = rows[0][0]
            if effective is not None and effective <= now:
                tx.notify()
            event = stream.parked(kind, park_reason, effective, token, now)
            tx.events(run_id, [*events, *asked, event])
            return effective

        return self._writing(op)
