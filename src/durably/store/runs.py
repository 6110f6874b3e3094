"""The runs role, written once: create, fork, read, list and count runs, requeue, cancel.

Over the :mod:`.tx` protocol; each dialect's queries and locks are its own (see there).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import (
    NotADurablyDatabase,
    RunConflict,
    RunFinished,
    RunNotFound,
    StoreError,
    clause,
)
from ..events import NewEvent
from ..history import (
    BLOCKED,
    CANCELLED,
    IN_DOUBT,
    PARKED,
    QUARANTINED,
    QUEUED,
    CorruptRecord,
    RunRecord,
    StepRecord,
)
from . import stream
from .base import NewRun, status_list
from .history import record_params
from .retained import Redacted, Redaction, Tombstoned, cited, tombstone_from_row
from .tx import Backend, Tx

RUN_FIELDS = len(RunRecord.__slots__)


CANCEL_ERROR_TYPE = "durably.Cancelled"
"""The ``error_type`` of a cancelled run."""

# Statuses whose code cannot run again without a person: a cancel ends them at once.
_STUCK = frozenset({BLOCKED, QUARANTINED, IN_DOUBT})


class Runs(Backend):
    """Store methods of the runs role (see :class:`~durably.store.base.Store`)."""

    def create_run(self, new: NewRun) -> tuple[RunRecord, bool]:
        """Insert the run unless it exists; return the row and whether it was created."""
        params: dict[str, Any] = {f: getattr(new, f) for f in NewRun.__slots__}
        now = params["now"] = self.clock.time()

        def op(tx: Tx) -> tuple[RunRecord, bool]:
            created = tx.q("insert_run", **params).rowcount == 1
            if created:
                refuse_tombstoned(tx, new.run_id)
                tx.events(new.run_id, [stream.created(new.workflow, new.queue, now)])
            row = tx.one("get_run", run_id=new.run_id)
            assert row is not None, "a run row vanished inside its own transaction"
            run = run_from_row(row)
            if tx.retried and not created:
                # The first attempt may have committed before its connection died: the
                # row is ours when it carries this call's own creation time, unclaimed.
                created = run.created_at == now and run.fencing_token == 0
            return run, created

        return self._shared_write(new.run_id, op)

    def fork_run(
        self, new: NewRun, records: Sequence[StepRecord], source: str | None = None
    ) -> RunRecord:
        """Create the queued run ``new`` with ``records`` as its history, in one
        transaction; raises ``RunConflict`` when the run id exists. ``source``, the run
        the records were copied from, is locked and checked again here: ``RunNotFound``
        once it is gone, ``Redacted`` once its values were forgotten since it was read."""
        params: dict[str, Any] = {f: getattr(new, f) for f in NewRun.__slots__}
        now = params["now"] = self.clock.time()
        rows = [record_params(new.run_id, r) for r in records]

        def op(tx: Tx) -> RunRecord:
            if source is not None:
                if tx.one("lock_fork_source", run_id=source) is None:
                    raise RunNotFound(f"no run {source!r} in {self._where}")
                refuse_redacted_tx(tx, source)
            if tx.q("insert_run", **params).rowcount != 1:
                found = tx.one("get_run", run_id=new.run_id)
                # On a retry the first attempt may have committed: the row is ours when
                # it carries this fork's own incarnation (drawn once, for this call).
                if tx.retried and found is not None:
                    run = run_from_row(found)
                    if run.incarnation == new.incarnation:
                        return run
                raise fork_conflict(new.run_id)
            refuse_tombstoned(tx, new.run_id)
            touch_cited(tx, records, self._where)
            for p in rows:
                tx.q("insert_record", **p)
            tx.events(new.run_id, [stream.created(new.workflow, new.queue, now)])
            row = tx.one("get_run", run_id=new.run_id)
            assert row is not None, "a run row vanished inside its own transaction"
            return run_from_row(row)

        return self._writing(op)

    def get_run(self, run_id: str) -> RunRecord | None:
        """The run, or None."""
        row = self._reading(lambda tx: tx.one("get_run", run_id=run_id))
        return None if row is None else run_from_row(row)

    def list_runs(
        self,
        status: str | Sequence[str] | None = None,
        workflow: str | None = None,
        limit: int = 100,
        version: str | None = None,
        since: float | None = None,
        *,
        queue: str | None = None,
        search: str | None = None,
        after: tuple[float, str] | None = None,
    ) -> list[RunRecord]:
        """Runs, newest first, keyset-paged after ``after``."""
        statuses = status_list(status)

        def op(tx: Tx) -> list[Any]:
            return tx.q(
                "list_runs",
                statuses=None if statuses is None else tx.array(statuses),
                workflow=workflow,
                limit=limit,
                version=version,
                since=since,
                queue=queue,
                search=search,
                after_at=None if after is None else after[0],
                after_id=None if after is None else after[1],
            ).fetchall()

        return [run_from_row(r) for r in self._reading(op)]

    def runs_by_version(self) -> list[tuple[str, str | None, str, int]]:
        """Unfinished runs counted per (workflow, version, status)."""
        rows = self._reading(lambda tx: tx.q("runs_by_version").fetchall())
        return [(r[0], r[1], r[2], int(r[3])) for r in rows]

    def count_runs(
        self,
        workflow: str | None = None,
        since: float | None = None,
        version: str | None = None,
        *,
        queue: str | None = None,
        search: str | None = None,
    ) -> dict[str, int]:
        """How many runs have each status."""
        params = {
            "workflow": workflow,
            "since": since,
            "version": version,
            "queue": queue,
            "search": search,
        }
        rows = self._reading(lambda tx: tx.q("count_runs", **params).fetchall())
        return {str(status): int(n) for status, n in rows}

    def requeue(
        self,
        run_id: str,
        from_statuses: Sequence[str],
        *,
        drop_intents: bool = False,
        drop_positions: Sequence[str] = (),
        resolve: tuple[str, str] | None = None,
    ) -> RunRecord:
        """Queue a stuck or failed run again, in one transaction (see the Store protocol).

        Raises ``RunNotFound``, or ``StoreError`` when the run's status is not one of
        ``from_statuses`` or ``resolve`` names a position without an intent.
        """
        now = self.clock.time()

        def op(tx: Tx) -> RunRecord:
            row = tx.one("lock_run_for_claim", run_id=run_id)
            if row is None:
                raise RunNotFound(f"no run {run_id!r} in {self._where}")
            run = run_from_row(row[:RUN_FIELDS])
            # A redaction committed since the caller read the run: its values are gone,
            # and a redacted run never runs again.
            refuse_redacted_tx(tx, run_id)
            # Also what a retry sees when the first attempt committed: the run is queued
            # already, and saying so is accurate.
            check_requeueable(run, from_statuses)
            key = {"run_id": run_id, "generation": run.generation, "now": now}
            if resolve is not None:
                n = tx.q("resolve_intent", **key, position=resolve[0], output=resolve[1])
                if n.rowcount != 1:
                    raise no_doubt_error(run_id, resolve[0])
            if drop_intents:
                tx.q("drop_intents", **key, position=None)
            for position in drop_positions:
                tx.q("drop_record", **key, position=position)
            # fetchall: a RETURNING statement left unfinished keeps SQLite from committing.
            queued = tx.q(
                "requeue_run", run_id=run_id, now=now, expected_token=run.fencing_token
            ).fetchall()
            tx.notify()
            tx.events(run_id, [stream.resumed(run, resolve is not None, now)])
            assert queued, "requeue lost a row it held locked"
            return run_from_row(queued[0])

        return self._writing(op)

    def request_cancel(self, run_id: str, reason: str | None) -> RunRecord:
        """Ask for the run to be cancelled, under its row lock (see the Store protocol).
        A parked run wakes now: waiting workers are notified in the same transaction."""
        now = self.clock.time()

        def op(tx: Tx) -> RunRecord:
            why = reason
            row = tx.one("lock_run_for_cancel", run_id=run_id)
            if row is None:
                raise cancel_not_found(run_id, self._where)
            run = run_from_row(row[:RUN_FIELDS])
            # A retry after an unknown outcome finds the flag set (or the run ended):
            # nothing more to do, and the run as it is now is the answer.
            plan = cancel_plan(run, bool(row[RUN_FIELDS]))
            if plan is None:
                return run
            events: list[NewEvent] = []
            if run.cancel_requested_at is None:
                tx.q("request_cancel", run_id=run_id, reason=why, now=now)
                events.append(stream.cancel_requested(why, run.fencing_token, now))
                if run.status == PARKED:
                    tx.notify()
            else:
                why = run.cancel_reason  # the first reason stays
            if plan == "at_once":
                tx.q(
                    "cancel_at_once",
                    run_id=run_id,
                    error_type=CANCEL_ERROR_TYPE,
                    error_message=why,
                    park_reason=cancelled_at_once_note(run),
                    now=now,
                    expected_token=run.fencing_token,
                )
                events += stream.status_changed(
                    CANCELLED,
                    run.fencing_token + 1,
                    now,
                    error_type=CANCEL_ERROR_TYPE,
                    error_message=why,
                )
            tx.events(run_id, events)
            found = tx.one("get_run", run_id=run_id)
            assert found is not None, "a cancel lost a row it held locked"
            return run_from_row(found)

        return self._writing(op)


def touch_cited(tx: Tx, records: Sequence[StepRecord], where: str) -> None:
    """Count a touch on every blob ``records`` cite (a fork copies citations without
    storing the blobs), so a prune's sweep running meanwhile keeps them; a blob already
    swept (its run was pruned since the fork read it) refuses the fork."""
    digests: set[str] = set()
    for rec in records:
        values, heads = cited(rec.inputs, rec.output)
        digests |= values | heads
    if not digests:
        return
    wanted = sorted(digests)  # one lock order: no deadlock with another toucher
    found = {str(r[0]) for r in tx.q("touch_blobs", digests=tx.array(wanted)).fetchall()}
    if found != digests:
        raise StoreError(
            f"{where}: {len(digests - found)} blob(s) the forked run cites are gone (the run"
            " was pruned or redacted while the fork was being made); nothing was forked"
        )


def refuse_redacted_tx(tx: Tx, run_id: str) -> None:
    """Roll back a write that would copy or re-open ``run_id`` once it is redacted
    (raises ``Redacted``), read under the run's lock in the writing transaction."""
    row = tx.one("get_redaction", run_id=run_id)
    if row is not None:
        raise Redacted(Redaction(str(row[0]), float(row[1]), str(row[2])))


def refuse_tombstoned(tx: Tx, run_id: str) -> None:
    """Roll back the creation of ``run_id`` when it has a tombstone (raises
    ``Tombstoned``). Read after the insert, in its transaction: on PostgreSQL a prune
    committing meanwhile let the insert through (its row was deleted), and this later
    statement reads the prune's commit, tombstone included."""
    row = tx.one("get_tombstone", run_id=run_id)
    if row is not None:
        raise Tombstoned(tombstone_from_row(row))


def cancel_not_found(run_id: str, where: str) -> RunNotFound:
    """``engine.cancel`` of a run the journal does not hold: say what to check."""
    return RunNotFound(
        f"no run {run_id!r} in {where}; nothing was cancelled. Check the run id (`durably"
        " runs list` shows runs) and the database (--db / DURABLY_URL)"
    )


def cancel_plan(run: RunRecord, has_records: bool) -> str | None:
    """What a cancel does to ``run`` (as found under its row lock): ``"at_once"`` (it ends
    ``cancelled`` in the cancel's transaction: queued and never ran, or stuck waiting
    for a person), ``"flag"`` (the flag is set; the workflow unwinds at its next step,
    a parked run wakes for it) or None (nothing to do: cancelled already, or the flag
    is set already). Raises ``RunFinished`` for a run that finished otherwise."""
    if run.status == CANCELLED:
        return None
    if run.terminal:
        raise RunFinished(
            f"run {run.run_id!r} already finished ({run.status}); there is nothing to"
            " cancel and its recorded outcome stands"
        )
    if run.status in _STUCK or (run.status == QUEUED and not has_records):
        return "at_once"
    return None if run.cancel_requested_at is not None else "flag"


def cancelled_at_once_note(run: RunRecord) -> str:
    """The recorded note (``park_reason``) of a run a cancel ended at once."""
    if run.status == QUEUED:
        return "cancelled while queued: it had not started, so nothing ran"
    return (
        f"cancelled while {run.status}: the workflow did not run again, so its cleanup"
        " (except blocks, saga compensations) did not run; to let it clean up, `durably"
        " retry` a run first and cancel it while it runs"
    )


def check_requeueable(run: RunRecord, from_statuses: Sequence[str]) -> None:
    """Raise ``StoreError`` unless an operator may requeue ``run`` from its status."""
    if run.status not in from_statuses:
        raise StoreError(
            f"run {run.run_id!r} is {run.status}, not {' or '.join(from_statuses)}; nothing"
            " was changed"
        )


def no_doubt_error(run_id: str, position: str) -> StoreError:
    """The error of a skip that names a position without an effect in doubt."""
    return StoreError(
        f"run {run_id!r} has no effect in doubt at position {position}; nothing was changed"
    )


def fork_conflict(run_id: str) -> RunConflict:
    """The error of a fork whose new run id is taken."""
    return RunConflict(
        f"run_id {run_id!r} already exists; a fork needs a new run id (leave it out and"
        " one is drawn)"
    )


def run_from_row(row: Sequence[Any]) -> RunRecord:
    """A run row read back, checked on the way out. Every query that reads a run selects
    every field of :class:`RunRecord` in order: a shorter row would silently default the
    incarnation to None, and with it change every key of the run."""
    if len(row) != RUN_FIELDS:
        raise AssertionError(f"a run query selected {len(row)} columns, not {RUN_FIELDS}")
    try:
        return RunRecord(*row).check()
    except CorruptRecord as exc:
        raise NotADurablyDatabase(
            f"corrupt run row: {clause(exc)}. The row was changed outside durably or written by a"
            " newer version: upgrade durably, or restore that row from a backup (nothing"
            " was changed by this read)"
        ) from exc
