"""The history role, written once over the :mod:`.tx` protocol: a generation's records
and blobs, ``finish`` and ``park``.

``append`` is written once too; the step path's tuned one-round-trip write is each
backend's named hook ``_append_quick`` (on SQLite one autocommit statement for a lone
record, or a record and its events in one written-out transaction, the events in one
statement; on PostgreSQL one statement for a record and its events), tried first, with
everything it does not take (blobs, many records, events alone, a refusal to explain, an
event stored already) in the transaction here. Where ``park``'s lock order differs it is
the named hook ``_lock_for_park``: PostgreSQL takes the run row's lock (``lock_token``)
in a statement of its own before anything else, so a signal, decision or cancel that held
the row commits first and ``park_run``'s fresh snapshot sees it; SQLite's ``BEGIN
IMMEDIATE`` has held the one writer lock from the start. Never unify the two by accident.
"""

from __future__ import annotations

import hashlib
import json
import operator
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..errors import LeaseLost, NotADurablyDatabase, SerializationError, StoreError
from ..events import NewEvent
from ..history import INTENT, CorruptRecord, StepRecord
from . import stream
from .durability import needs_sync
from .groupcommit import Append, GroupCommit
from .tx import Backend, Tx

if TYPE_CHECKING:
    from ..approvals import ApprovalRequest

# Every column of a step row (the blobs a record carries go to the blobs table).
STEP_FIELDS: tuple[str, ...] = tuple(f for f in StepRecord.__slots__ if f != "blobs")
# The record's fields read at once (C code), named as the queries' parameters are.
_record_values = operator.attrgetter(*STEP_FIELDS)
_PARAM_NAMES = tuple("input_digest" if f == "digest" else f for f in STEP_FIELDS)


class History(Backend):
    """Store methods of the history role (see :class:`~durably.store.base.Store`)."""

    durability: str
    _group: GroupCommit  # the backend's, built with _append_one and _append_many
    # The driver's errors: raised inside a batch, they fail its transaction (every
    # caller's error); anything else one append raises is that append's alone.
    _driver_errors: tuple[type[Exception], ...] = ()

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

    def _append_quick(
        self,
        run_id: str,
        token: int,
        records: Sequence[StepRecord],
        events: Sequence[NewEvent],
        durable: bool = True,
    ) -> bool | None:
        """The backend's tuned append, tried first: write ``records`` and ``events`` in
        one autocommit statement when the dialect can (see the backends) and return
        whether a cancel was asked for. None when it cannot, or when the statement was
        refused (it then wrote nothing): the transaction of :meth:`append` decides, and
        explains a refusal, as for every other append. ``durable`` False (effects mode,
        a pure step): its commit may skip the fsync."""
        raise NotImplementedError

    def append(
        self,
        run_id: str,
        token: int,
        records: Sequence[StepRecord],
        events: Sequence[NewEvent] = (),
    ) -> bool:
        """Write ``records`` (their blobs first) and ``events`` in one fenced transaction;
        returns whether a cancel was asked for (read by the same statements).

        Idempotent on what is stored identically, a conflict on anything different: each
        part has its own identity (a record its position and content, an event its
        dedupe), so the same append sent again after a commit whose outcome was unknown
        changes nothing, an identical record's events are stored unless they are already,
        and a different record at a recorded position (a ``StoreError``) or a stale token
        (``LeaseLost``) writes nothing of the append. An append of nothing is a fenced
        read of the cancel flag.

        Appends of other threads made while a commit is in progress share the next
        transaction and its fsync (:mod:`.groupcommit`); this returns only after the
        commit that carries this append, and its own refusal is its own.
        """
        durable = needs_sync(self.durability, records)
        return self._group.submit(Append(run_id, token, records, events, durable))

    def append_all(self, appends: Sequence[Append]) -> None:
        """Several callers' appends (the async runs of one event loop) in one commit,
        with any other threads' appends queued beside them (:meth:`GroupCommit.submit_all`):
        each ``Append`` gets its own ``result`` (the cancel flag) or ``error`` (what
        :meth:`append` would have raised for it alone); returns once the commit that
        carries them is done."""
        for item in appends:
            item.durable = needs_sync(self.durability, item.records)
        self._group.submit_all(appends)

    def _append_one(self, item: Append) -> bool:
        """One append alone (group commit's lone writer): the tuned statement, else a
        transaction of its own."""
        if item.write is not None:  # a shared write (see GroupCommit), alone
            item.value = self._writing(item.write, durable=item.durable)
            return False
        quick = self._append_quick(item.run_id, item.token, item.records, item.events, item.durable)
        if quick is not None:
            return quick
        return self._writing(lambda tx: self._append_in(tx, item), durable=item.durable)

    def _append_many(self, items: Sequence[Append]) -> None:
        """Several runs' appends in one transaction and one commit (group commit), in
        run order (two batches never take run row locks in opposite orders; one run's
        appends keep theirs). Each is fenced on its own inside a savepoint: a stale token,
        an overwrite, a refused row or a record that fails its check rolls back that
        append alone and is its caller's error; a driver's error fails the transaction,
        so every caller's (on PostgreSQL, run again once on a fresh connection when the
        first died, like every write: each append then recognises its own committed
        record)."""
        ordered = sorted(items, key=lambda i: i.run_id)

        def op(tx: Tx) -> None:
            # Every member's blobs first, in one digest order: citing a stored blob locks
            # its row (put_blob), and two batches locking shared blobs in opposite orders
            # would deadlock on PostgreSQL. A blob of a member refused below stays,
            # cited by nothing: harmless (content-addressed, never a candidate of a sweep).
            put_blobs(tx, [r for item in ordered for r in item.records], self.clock.time())
            for item in ordered:
                item.error = None
                try:
                    with tx.savepoint():
                        if item.write is not None:  # a shared write: its value
                            item.value = item.write(tx)
                            item.result = False
                        else:
                            item.result = self._append_in(tx, item, blobs_put=True)
                except (LeaseLost, StoreError) as exc:
                    item.error = exc
                except Exception as exc:
                    if isinstance(exc, self._driver_errors):
                        raise
                    # Not the database's: this append's own (a record that fails its
                    # check, a value the driver cannot bind), raised to its caller as
                    # when it writes alone; the savepoint undid it, the others commit.
                    item.error = exc

        self._writing(op, durable=any(i.durable for i in items))

    def _append_in(self, tx: Tx, item: Append, blobs_put: bool = False) -> bool:
        """One append's statements in the open transaction (see :meth:`append`);
        ``blobs_put``: its records' blobs are written already."""
        run_id, token = item.run_id, item.token
        if item.records:
            cancel = self._append_records(tx, run_id, token, item.records, blobs_put)
        else:
            # Events alone (a step's retry) or nothing: fenced by the token, read under
            # the run row's lock (PostgreSQL's lock_token locks the row; SQLite's BEGIN
            # IMMEDIATE holds the one writer), so no claim raises it before commit.
            row = tx.one("lock_token", run_id=run_id)
            if row is None or row[0] != token:
                raise LeaseLost(run_id, token)
            cancel = bool(row[1])
        tx.events(run_id, item.events)
        return cancel

    def _append_records(
        self,
        tx: Tx,
        run_id: str,
        token: int,
        records: Sequence[StepRecord],
        blobs_put: bool = False,
    ) -> bool:
        """Upsert ``records`` (fenced) in the open transaction, their blobs first; returns
        whether a cancel was asked for. Raises ``LeaseLost`` on a stale token, or a
        ``StoreError`` when another result is stored at a position (one stored equal is
        this very write, retried after an unknown commit: success)."""
        now = self.clock.time()
        cancel = False
        if not blobs_put:
            # The records' blobs first, in their transaction: no record names a missing
            # blob. Digest-keyed inserts: a retry writes no blob twice (it only counts a
            # touch, see put_blob).
            put_blobs(tx, records, now)
        for rec in records:
            # fetchall: an unfinished RETURNING statement would keep SQLite's write pending.
            rows = tx.q("append_record", **record_params(run_id, rec), token=token).fetchall()
            cancel = bool(rows[0][0]) if rows else self._refused(tx, run_id, token, rec)
        return cancel

    def _refused(self, tx: Tx, run_id: str, token: int, rec: StepRecord) -> bool:
        """Explain a refused upsert: a stale token, or another record at the position.

        A stored record equal to ``rec`` is this very write sent again (a retry after a
        commit whose outcome was unknown, by the store or the engine): success, not a
        conflict (returns whether a cancel was asked for).
        """
        row = tx.one("check_token", run_id=run_id)
        if row is None or row[0] != token:
            raise LeaseLost(run_id, token)
        # append_record takes any intent over an intent, so a refused intent met a result
        # or a wait, never its equal: no need to read the stored row back.
        if rec.status != INTENT:
            found = tx.one("load_record", run_id=run_id, position=rec.position)
            if found is not None and StepRecord(*found) == rec:
                return bool(row[1])
        raise overwrite_error(run_id, rec.position)

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

        if any(r.blobs for r in records):
            # Its blobs are locked as they are cited: not inside a batch, whose members'
            # blobs are all written first, in one order.
            self._writing(op)
        else:
            self._shared_write(run_id, op)

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


def overwrite_error(run_id: str, position: str) -> StoreError:
    """The error of an append that would overwrite a recorded result."""
    return StoreError(
        f"run {run_id!r}: position {position} already holds a result; a result is never"
        " overwritten (this is a bug in durably; please report it)"
    )


def record_params(run_id: str, rec: StepRecord) -> dict[str, Any]:
    """The named parameters of a record's row, checked on the way in."""
    rec.check()
    params: dict[str, Any] = dict(zip(_PARAM_NAMES, _record_values(rec), strict=True))
    params["run_id"] = run_id
    return params


def put_blobs(tx: Tx, records: Sequence[StepRecord], now: float) -> None:
    """Write the blobs ``records`` carry (UTF-8 bytes), each once, in digest order:
    citing a stored blob locks its row (see put_blob), and two transactions that lock
    the same rows in one order cannot deadlock on them."""
    blobs = dict(b for rec in records for b in rec.blobs)
    if blobs:
        tx.many("put_blob", [_blob_row(d, blobs[d], now) for d in sorted(blobs)])


def _blob_row(digest: str, text: str, now: float) -> dict[str, Any]:
    data = text.encode("utf-8")
    return {"digest": digest, "data": data, "size": len(data), "now": now}


def blobs_from_rows(rows: Sequence[Sequence[Any]]) -> dict[str, str]:
    """Blob rows ``(digest, data)`` read back, as text by digest, each checked on the way
    out: a blob is stored under the sha256 of its bytes, so bytes that hash to anything
    else were changed after they were written (a hand edit, a damaged file) and are
    never handed out as a recorded value. ``SerializationError`` names the blob; the
    engine blocks the run reading it (never fails it), and nothing is changed."""
    out: dict[str, str] = {}
    for digest, data in rows:
        raw = bytes(data)
        actual = hashlib.sha256(raw).hexdigest()
        if actual != digest:
            raise SerializationError(
                f"blob {digest} does not match its sha256: its {len(raw):,} stored bytes"
                f" hash to {actual[:16]}..., so the blobs table was edited or damaged after"
                " it was written and its contents are not used"
            )
        out[digest] = raw.decode("utf-8")  # written as UTF-8 text; its hash says unchanged
    return out


def park_waits(
    wait_signals: Sequence[str], approvals: Sequence[ApprovalRequest]
) -> tuple[dict[str, Any], list[ApprovalRequest]]:
    """A park's ``wait_signal`` and ``wait_approval`` parameters and the requests whose
    rows it writes: each a JSON array of names (request ids), or None when there are none
    (``runs.wait_signal`` holds this array: a signal of any name in it wakes the run)."""
    names = list(dict.fromkeys(wait_signals))
    reqs = list(approvals)
    ids = [r.request_id for r in reqs]
    params = {
        "wait_signal": json.dumps(names) if names else None,
        "wait_approval": json.dumps(ids) if ids else None,
    }
    return params, reqs


def approval_params(run_id: str, req: ApprovalRequest) -> dict[str, Any]:
    """The parameters of put_approval for ``req``."""
    return {
        "run_id": run_id,
        "request_id": req.request_id,
        "action": req.action,
        "args": req.args,
        "digest": req.digest,
        "requested_at": req.requested_at,
        "expires_at": req.expires_at,
    }
