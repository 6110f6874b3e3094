"""The leases role, written once: claim a run, claim the next runnable one, renew and
release the lease (over the :mod:`.tx` protocol).

Where the dialects lock differently the backend says how, through two named hooks:
``_served_params`` (how a worker's workflows and versions go into ``next_runnable``) and
``_open_queues`` (which queues have a free slot: SQLite counts under its one writer;
PostgreSQL takes each limited queue's advisory lock, sorted, before counting). The row
locks are in each dialect's queries: ``lock_run_for_claim`` is ``FOR UPDATE`` and
``next_runnable`` ``FOR UPDATE SKIP LOCKED`` on PostgreSQL, plain reads under
``BEGIN IMMEDIATE`` on SQLite.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..errors import RunFinished, RunInDoubt, RunLeased, RunNotFound, RunQuarantined
from ..events import NewEvent
from ..history import IN_DOUBT, QUARANTINED, RunRecord
from . import stream
from .base import Owner, Served
from .runs import RUN_FIELDS, run_from_row
from .tx import Backend, Tx

CLAIM_SCAN_MAX = 64  # runs quarantined instead of claimed, at most, per claim attempt
OWNERS_SCAN_MAX = 1024  # live owners of this host judged per claim attempt


class Leases(Backend):
    """Store methods of the leases role (see :class:`~durably.store.base.Store`)."""

    def _served_params(self, served: Served) -> dict[str, Any]:
        """The parameters of ``next_runnable`` naming what a worker serves."""
        raise NotImplementedError

    def _open_queues(
        self, tx: Tx, queues: Sequence[str], limits: dict[str, int], now: float, dead: list[str]
    ) -> list[str]:
        """The queues of ``queues`` with a free slot under ``limits`` (runs of the
        ``dead`` owners hold none), locked as the dialect needs until commit."""
        raise NotImplementedError

    def claim(
        self,
        run_id: str,
        owner: Owner,
        lease_s: float,
        max_starts: int,
        owner_dead: Callable[[str], bool],
    ) -> RunRecord:
        """Take the lease with a new fencing token (see the Store protocol)."""
        now = self.clock.time()

        def op(tx: Tx) -> RunRecord | None:
            row = tx.one("lock_run_for_claim", run_id=run_id)
            if row is None:
                raise RunNotFound(f"no run {run_id!r} in {self._where}")
            run = run_from_row(row[:RUN_FIELDS])
            if (
                tx.retried
                and run.owner == str(owner)
                and run.updated_at == now
                and (run.lease_expires_at == now + lease_s)
            ):
                # The first attempt committed before its connection died: this is our
                # own claim, stamped with this call's time; do not claim twice.
                return run
            check_claimable(run, now, owner_dead)
            return self._take(tx, row, owner, lease_s, max_starts, now)

        taken = self._shared_write(run_id, op)
        if taken is None:
            raise quarantined_error(run_id, max_starts)
        return taken

    def claim_next(
        self,
        owner: Owner,
        lease_s: float,
        max_starts: int,
        owner_dead: Callable[[str], bool],
        served: Served,
        queues: Sequence[str],
        queue_limits: dict[str, int] | None = None,
    ) -> RunRecord | None:
        """Claim the oldest runnable run a worker may take, or return None.

        Runnable: queued; running with an expired lease, no owner, or a provably dead owner;
        parked with a due wake-up. ``served`` maps workflow names to the versions this
        worker registers (None: the registration without a version); a run without a
        version is served by any of them. ``queue_limits`` caps running runs per queue
        across all workers. Every filter is in the query; the owners of this host found
        dead in Python go in as a list.
        """
        now = self.clock.time()
        if not served or not queues:
            return None
        serving = self._served_params(served)

        def op(tx: Tx) -> RunRecord | None:
            if tx.retried:
                # The first attempt's commit outcome is unknown (its connection died): a
                # run it took is ours, stamped with this call's time. Returning it (not
                # claiming another) leaves no run leased to a claim nobody received.
                mine = tx.one(
                    "own_claim", owner=str(owner), now=now, lease_expires_at=now + lease_s
                )
                if mine is not None:
                    return run_from_row(mine)
            candidates = tx.q(
                "same_host_owners", now=now, pattern=owner.host_pattern(), limit=OWNERS_SCAN_MAX
            ).fetchall()
            dead = dead_owners([r[0] for r in candidates], owner_dead)
            open_queues = self._open_queues(tx, queues, queue_limits or {}, now, dead)
            if not open_queues:
                return None
            params = {
                **serving,
                "queues": tx.array(open_queues),
                "now": now,
                "dead": tx.array(dead),
            }
            # Each pass either claims or quarantines the run it found (which then leaves
            # the runnable set), so the bound only guards against a bug looping forever.
            for _scan in range(CLAIM_SCAN_MAX):
                row = tx.one("next_runnable", **params)
                if row is None:
                    return None
                taken = self._take(tx, row, owner, lease_s, max_starts, now)
                if taken is not None:
                    return taken
            return None

        return self._writing(op)

    def _take(
        self,
        tx: Tx,
        row: Sequence[Any],
        owner: Owner,
        lease_s: float,
        max_starts: int,
        now: float,
    ) -> RunRecord | None:
        """Claim the run of ``row`` (locked, with records_at_last_start last) inside the
        open transaction; None when it is quarantined instead."""
        run = run_from_row(row[:RUN_FIELDS])
        records = int(tx.scalar("count_records", run_id=run.run_id, generation=run.generation))
        # Progress = results recorded since the previous start; a run that keeps dying at
        # the same place stops being restarted after max_starts starts.
        stalled = 1 if records > row[RUN_FIELDS] else run.starts_without_progress + 1
        if stalled > max_starts:
            tx.q("quarantine_run", run_id=run.run_id, now=now, expected_token=run.fencing_token)
            tx.events(run.run_id, [stream.quarantined(run, stalled - 1, now)])
            return None
        tx.events(run.run_id, stream.claimed(run, str(owner), lease_s, now))
        # fetchall: a RETURNING statement left unfinished keeps SQLite from committing.
        claimed = tx.q(
            "claim_run",
            run_id=run.run_id,
            owner=str(owner),
            lease_expires_at=now + lease_s,
            starts_without_progress=stalled,
            records=records,
            now=now,
            expected_token=run.fencing_token,
        ).fetchall()
        assert claimed, "a claim lost a row it held locked"
        return run_from_row(claimed[0])

    def renew(self, run_id: str, token: int, lease_s: float) -> bool:
        """Extend the lease; False when the token is stale."""

        def op(tx: Tx) -> bool:
            # The time read inside the transaction (the lease runs from when it holds).
            expires = self.clock.time() + lease_s
            n = tx.q("renew_lease", run_id=run_id, token=token, lease_expires_at=expires)
            return n.rowcount == 1

        return self._writing(op, atomic=False)

    def release(
        self,
        run_id: str,
        token: int,
        status: str | None = None,
        park_reason: str | None = None,
        wake_at: float | None = None,
        events: Sequence[NewEvent] = (),
        error_type: str | None = None,
    ) -> None:
        """Give up the lease, optionally parking the run; a stale token changes nothing.
        ``events`` (and the new status's own event) are written when the token holds.
        A released run may be runnable again: PostgreSQL's release_run wakes workers."""
        now = self.clock.time()
        changed = [
            *events,
            *stream.status_changed(status, token, now, park_reason, error_type, wake_at=wake_at),
        ]
        params = {
            "run_id": run_id,
            "token": token,
            "status": status,
            "park_reason": park_reason,
            "wake_at": wake_at,
            "now": now,
        }

        def op(tx: Tx) -> None:
            released = tx.q("release_run", **params).rowcount == 1
            if released and changed:
                tx.events(run_id, changed)

        # A plain give-back is one statement (autocommit on PostgreSQL).
        self._writing(op, atomic=bool(changed))


def check_claimable(run: RunRecord, now: float, owner_dead: Callable[[str], bool]) -> None:
    """Raise unless ``run`` may be claimed now: ``RunFinished`` for a finished run (a
    claim must never reopen it), ``RunInDoubt`` / ``RunQuarantined`` for a run waiting
    for a person, ``RunLeased`` while a live owner holds an unexpired lease."""
    if run.terminal:
        raise RunFinished(
            f"run {run.run_id!r} is already {run.status}; its recorded outcome stands"
        )
    if run.status == IN_DOUBT:
        raise RunInDoubt(f"run {run.run_id!r} is in doubt: {run.park_reason}")
    if run.status == QUARANTINED:
        raise RunQuarantined(
            f"run {run.run_id!r} is quarantined after {run.starts} starts without progress;"
            " fix the cause, then `durably retry` it"
        )
    # The same process does not get a pass: another thread of it may be driving the run.
    # A driver that ends for any reason releases its lease, so this costs nothing normally.
    if run.owner is None:
        return
    if run.lease_expires_at is not None and run.lease_expires_at <= now:
        return
    if owner_dead(run.owner):
        return
    left = (run.lease_expires_at or now) - now
    raise RunLeased(
        f"run {run.run_id!r} is being driven by {run.owner} (lease expires in {left:.1f} s);"
        " two processes may never drive one run. Wait for it to finish or for the lease to"
        " expire, or stop that process."
    )


def dead_owners(candidates: Sequence[str], owner_dead: Callable[[str], bool]) -> list[str]:
    """The owners among ``candidates`` (this host's, with live leases) that are provably
    dead: the one judgement a claim query cannot make itself, made here and passed in."""
    return sorted({o for o in candidates if owner_dead(o)})


def quarantined_error(run_id: str, max_starts: int) -> RunQuarantined:
    """The error of a run that was just quarantined."""
    return RunQuarantined(
        f"run {run_id!r} was started {max_starts} times without recording progress (each"
        " start crashed or was killed at the same place), so it is quarantined instead of"
        " looping. Look at `durably runs show` for the step it dies in, fix the cause, then"
        " `durably retry` it."
    )
