"""Leases: this process as an owner, claims, the lease keeper and its heartbeats.

A claim takes the run's lease with a new fencing token. A lease this process took but
cannot vouch for (its release failed, or the reply of the claim that took it was lost)
has no live driver: this process's own next claim takes it over at once (raising the
token fences any driver it could still have). One background thread per engine renews
the leases of every run the engine drives; when the connection holding this process's
owner lock (PostgreSQL) dies, every run it drives stops as if its lease were lost, and
their leases are given back at once so another process need not wait for them.
"""

from __future__ import annotations

import os
import threading

from .._fork import reset_after_fork
from .._log import LazyLogger
from .._record import Record
from ..clock import Clock
from ..errors import DurablyError, StoreError
from ..history import RunRecord
from ..ownership import owner_dead
from ..replay.kernel import RunCore
from ..store.base import Owner, Store
from .base import Base

# Runs this process stopped driving but could not release (the store failed): its own
# claim may take them over at once instead of waiting lease_s for its own lease.
_UNRELEASED: set[tuple[str, str]] = set()

_log = LazyLogger("durably")


class Leases:
    """This process's owner identity, its claims and its give-backs."""

    def __init__(self, base: Base) -> None:
        self._base = base
        self._owner: tuple[int, Owner] | None = None
        opts = base.opts
        # The keeper renews through the store the engine opened with (a store swapped in
        # later, to inject faults into recording calls, leaves the heartbeat alone).
        self.keeper = LeaseKeeper(base.store, opts.clock, opts.lease_s, opts.heartbeat_s)

    def owner_now(self) -> Owner:
        """This process as an owner, shown alive to the database (PostgreSQL's owner lock)
        before it claims anything."""
        pid = os.getpid()
        if self._owner is None or self._owner[0] != pid:  # a forked child is a new owner
            self._owner = (pid, Owner.current())
        # A lock session that ended since the last look (the keeper looks only every
        # heartbeat) stops the runs driven now, before the lock is taken again below:
        # else the new session would hide the gap and the next claim would be stopped.
        self.keeper.check_owner_lock(ping=False)
        self._base.store.hold_owner(self._owner[1])
        return self._owner[1]

    def claim(self, run_id: str) -> RunRecord:
        """Claim the run (retrying a transient store error); ``RunLeased`` while another
        owner holds its lease (the drive loop follows that owner's run)."""
        base = self._base
        opts = base.opts
        me, where = str(self.owner_now()), (opts.url, run_id)
        unknown = False  # an earlier attempt failed: it may have claimed the run for us

        def gone(owner: str) -> bool:
            # A lease this process could not give back (its store failed), or took in an
            # attempt whose reply was lost (the commit went through, the connection did
            # not), has no live driver: taking it over raises the token, which fences it.
            mine = owner == me and (unknown or where in _UNRELEASED)
            return mine or owner_dead(owner)

        def claim() -> RunRecord:
            nonlocal unknown
            try:
                return base.store.claim(
                    run_id, self.owner_now(), opts.lease_s, opts.max_starts, gone
                )
            except StoreError:
                unknown = True
                raise

        run = base.call(claim)
        _UNRELEASED.discard(where)
        return run

    def give_back(self, run_id: str, token: int) -> None:
        """Release the lease if the store lets us, in one attempt; else it expires."""
        where = (self._base.opts.url, run_id)
        try:
            self._base.store.release(run_id, token)
            _UNRELEASED.discard(where)
        except DurablyError as exc:
            _UNRELEASED.add(where)
            _log.warning("durably: cannot release run %s (%s); its lease will expire", run_id, exc)

    def not_released(self, run_id: str) -> None:
        """Note that the lease of ``run_id`` could not be given back: this process's own
        next claim of it takes it over at once."""
        _UNRELEASED.add((self._base.opts.url, run_id))

    def close(self) -> None:
        """Stop lease keeping."""
        self.keeper.close()


class LeaseKeeper:
    """One background thread per engine (per process) renewing the leases of every run the
    engine is driving; a thread per run would cost more than a short run itself.

    When a renewal is refused (another claim raised the token), the run's core is told,
    and its next step raises instead of running any further effect. Each successful
    renewal moves the core's local lease deadline (on the engine's clock, taken before
    the call, so the local deadline is never later than the stored one).

    The simulator's seam (:mod:`durably.chaos.dst`): with ``threaded`` set False before
    the first :meth:`add`, no thread is started and whoever set it calls :meth:`beat`
    (one round of renewals) on its own schedule and clock; :meth:`cores` is what a beat
    would renew. Real use never sets it.
    """

    threaded = True

    def __init__(self, store: Store, clock: Clock, lease_s: float, every_s: float) -> None:
        self._store = store
        self._clock = clock
        self._lease_s = lease_s
        self._every_s = every_s
        self._cores: dict[int, RunCore] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._pid = 0
        reset_after_fork(self)

    def _after_fork_in_child(self) -> None:
        """Forget the parent's runs (renewing their leases from here would keep a dead
        parent's runs looking alive) and its thread; the child starts its own on first
        use. Locks and the event are new: a parent thread may have held theirs."""
        stopped = self._stop.is_set()
        self._cores = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        if stopped:
            self._stop.set()
        self._pid = 0

    def add(self, core: RunCore) -> Heartbeat:
        """Keep ``core``'s lease until the returned handle is stopped."""
        with self._lock:
            self._cores[id(core)] = core
            if self._pid != os.getpid() and self.threaded:  # first use, or a forked child
                self._pid = os.getpid()
                t = threading.Thread(target=self._loop, daemon=True, name="durably-lease")
                t.start()
        return Heartbeat(self, core)

    def check_owner_lock(self, ping: bool = True) -> bool:
        """Look whether the owner lock's connection died (see :meth:`_owner_lock_lost`);
        the keeper pings it, a claim only looks (no round trip)."""
        with self._lock:
            cores = list(self._cores.values())
        return self._owner_lock_lost(cores, ping)

    def _owner_lock_lost(self, cores: list[RunCore], ping: bool) -> bool:
        """When the connection holding this process's owner lock (PostgreSQL) died, others
        may see the lock free and judge this process dead-looking: every run it drives
        counts as having lost its lease (latched in the core, so it stops at its next
        step), and their leases are given back at once. Runs claimed later take the lock
        again on a new connection."""
        try:
            lost = self._store.owner_lock_lost(ping)
        except DurablyError:
            return False
        if lost:
            _log.warning(
                "durably: lost the connection holding this process's owner lock; stopping"
                " %d run(s) as if their leases were lost (they resume elsewhere or on retry)",
                len(cores),
            )
            for core in cores:
                core.lose_lease()
                self.remove(core)
            for core in cores:
                # Given back now (fenced by its token): nobody here will use the lease, and
                # another process would otherwise wait for it to expire. A step still
                # running here finishes unrecorded; the next owner runs it again under
                # the same key, as after a crash.
                try:
                    self._store.release(core.run_id, core.token)
                except DurablyError as exc:  # its lease expires instead
                    _log.warning("durably: cannot release run %s (%s)", core.run_id, exc)
        return lost

    def remove(self, core: RunCore) -> None:
        """Stop renewing ``core``'s lease (idempotent)."""
        with self._lock:
            self._cores.pop(id(core), None)

    def close(self) -> None:
        """Stop the thread."""
        self._stop.set()

    def cores(self) -> list[RunCore]:
        """The cores whose leases this keeper renews now."""
        with self._lock:
            return list(self._cores.values())

    def _loop(self) -> None:
        while not self._stop.wait(self._every_s):
            self.beat()

    def beat(self) -> None:
        """One round: look at the owner lock, then renew every core's lease once (a
        refused renewal tells the core and stops renewing it)."""
        if self.check_owner_lock():
            return
        for core in self.cores():
            asked_at = self._clock.time()
            try:
                renewed = self._store.renew(core.run_id, core.token, self._lease_s)
            except DurablyError:
                continue  # a busy database: try again at the next beat
            if renewed:
                core.lease_renewed(asked_at + self._lease_s)
            else:
                core.token_refused(asked_at)
                self.remove(core)


class Heartbeat(Record):
    """The lease keeping of one attempt."""

    keeper: LeaseKeeper
    core: RunCore

    def __init__(self, keeper: LeaseKeeper, core: RunCore) -> None:
        self.keeper = keeper
        self.core = core

    def stop(self) -> None:
        """Stop renewing this attempt's lease (idempotent)."""
        self.keeper.remove(self.core)
