"""Workers: processes that claim runnable runs from the journal and drive them.

A worker claims a run under a lease with a new fencing token (``FOR UPDATE SKIP LOCKED``
on PostgreSQL, ``BEGIN IMMEDIATE`` on SQLite, so several processes on one machine work
too), renews the lease by heartbeat while it drives the run, and gives it back when done.
A worker whose append is refused (its token went stale: it stalled past its lease and
another worker took the run) gets ``StaleLease``, stops that run at once and runs no
further effect for it. Expired leases are reclaimed by any worker.

Stopping: on SIGTERM (or SIGINT) a worker stops claiming, lets its current runs finish
for up to ``drain_s``, then gives back the rest (their leases are released, so another
worker picks them up at once) and exits. After a SIGKILL, another worker resumes the run
when its lease expires (``lease_s``, default 30 s), or at once on the same host.

Parking: a run that parks (``ctx.sleep``) gives its slot back at once and is counted in
``stats.other["parked"]``; it holds no thread, process or slot while it waits, and a
claim takes it again when it is due (PostgreSQL: a NOTIFY wakes workers when a park is
due at once; otherwise workers look every ``poll_interval_s``).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from types import FrameType

from .engine import Engine
from .errors import (
    Cancelled,
    ConfigError,
    DurablyError,
    RunParked,
    StaleLease,
    StoreError,
    WorkflowFailed,
)
from .history import RunRecord
from .limits import WORKER_CONCURRENCY_MAX
from .ownership import CLOCK_CHECK_EVERY_S

log = logging.getLogger("durably.worker")

CONCURRENCY_MAX = WORKER_CONCURRENCY_MAX  # its old name (durably.limits)
POLL_INTERVAL_S_DEFAULT = 0.2
STOP_CHECK_S = 0.25  # longest an idle worker goes without looking for a stop
DRAIN_S_DEFAULT = 30.0
ERROR_BACKOFF_S = 1.0


@dataclass
class WorkerStats:
    """What a worker did, for logs and tests."""

    claimed: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0
    stale: int = 0
    other: Counter[str] = field(default_factory=Counter)


class Worker:
    """Claims and drives runs of ``engine``'s registered workflows.

    ``concurrency`` runs at once in this process (threads); ``queues`` to serve;
    ``poll_interval_s`` is the longest wait between claim attempts when idle (PostgreSQL
    wakes workers at once with LISTEN/NOTIFY; SQLite polls); ``drain_s`` bounds a graceful
    stop. ``clock_check_s``: how often the worker compares its clock with the database's
    (at start, then at this period), warning when they differ by more than
    ``durably.limits.CLOCK_SKEW_WARN_S`` (PostgreSQL only: SQLite shares this host's
    clock).
    """

    def __init__(
        self,
        engine: Engine,
        *,
        concurrency: int = 4,
        queues: tuple[str, ...] = ("default",),
        poll_interval_s: float = POLL_INTERVAL_S_DEFAULT,
        drain_s: float = DRAIN_S_DEFAULT,
        clock_check_s: float = CLOCK_CHECK_EVERY_S,
    ) -> None:
        if not 1 <= concurrency <= CONCURRENCY_MAX:
            raise ConfigError(f"concurrency={concurrency}: choose 1..{CONCURRENCY_MAX}")
        if not queues:
            raise ConfigError("a worker serves at least one queue")
        if poll_interval_s <= 0 or drain_s < 0 or clock_check_s <= 0:
            raise ConfigError("poll_interval_s and clock_check_s must be > 0, drain_s >= 0")
        self.engine = engine
        self.concurrency = concurrency
        self.queues = list(queues)
        self.poll_interval_s = poll_interval_s
        self.drain_s = drain_s
        self.clock_check_s = clock_check_s
        self._next_clock_check = 0.0  # monotonic; 0 checks at the first loop
        self._next_beat = 0.0  # monotonic; 0 writes the worker's row at the first loop
        self.stats = WorkerStats()
        self._stopping = threading.Event()
        self._slots = threading.Semaphore(concurrency)
        self._lock = threading.Lock()
        self._per_queue: Counter[str] = Counter()
        self._futures: set[Future[None]] = set()

    def stop(self) -> None:
        """Ask the worker to stop claiming and drain (safe from any thread or a signal)."""
        self._stopping.set()

    def install_signal_handlers(self) -> None:
        """Stop gracefully on SIGTERM and SIGINT (call from the main thread)."""

        def handler(signum: int, frame: FrameType | None) -> None:
            log.info("durably worker: signal %s, draining", signum)
            self.stop()

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)

    def run(self, max_runs: int | None = None) -> WorkerStats:
        """Claim and drive runs until stopped (or ``max_runs`` were claimed)."""
        pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="durably-run")
        try:
            while not self._stopping.is_set():
                self._maybe_check_clock()
                self._maybe_beat()
                self._maybe_retain()
                if max_runs is not None and self.stats.claimed >= max_runs:
                    break
                if not self._slots.acquire(timeout=min(self.poll_interval_s, STOP_CHECK_S)):
                    continue
                run = self._claim()
                if run is None:
                    self._slots.release()
                    self._idle()
                    continue
                self._start(pool, run)
        finally:
            self._drain(pool)
            self._unregister()
        return self.stats

    def _idle(self) -> None:
        """Wait for work (a notification, or ``poll_interval_s``) in slices of at most
        STOP_CHECK_S, so a stop (SIGTERM) is seen at once: one long wait under
        ``--poll-interval-s 30`` on PostgreSQL delayed the drain by up to 30 s."""
        deadline = time.monotonic() + self.poll_interval_s
        while not self._stopping.is_set():
            left = deadline - time.monotonic()
            if left <= 0 or self.engine.wait_for_work(min(left, STOP_CHECK_S)):
                return

    def _maybe_beat(self) -> None:
        """Keep this worker's row in the journal's ``workers`` table alive (written at
        start, then every third of a lease), so `durably runs why` can say how many
        workers serve a queue; a dead worker's row expires after one lease."""
        if time.monotonic() < self._next_beat:
            return
        self._next_beat = time.monotonic() + self.engine.lease_s / 3
        try:
            self.engine.beat_worker(self.queues)
        except DurablyError as exc:
            log.warning("durably worker: cannot record this worker as alive (%s)", exc)

    def _maybe_retain(self) -> None:
        """Apply the engine's ``retain_finished`` (a bounded prune at most once a minute,
        only while this worker holds the journal's prune lease: one pruner at a time)."""
        try:
            report = self.engine.apply_retention()
        except DurablyError as exc:
            log.warning("durably worker: cannot prune finished runs (%s); retrying later", exc)
            return
        if report is not None and report.runs:
            self.stats.other["pruned"] += report.runs

    def _unregister(self) -> None:
        try:
            self.engine.drop_worker()
        except DurablyError as exc:  # its row expires instead
            log.warning("durably worker: cannot remove this worker's row (%s)", exc)

    def _maybe_check_clock(self) -> None:
        """Compare clocks with the database at start and every ``clock_check_s``: leases
        and key expiry rely on hosts' clocks agreeing (docs/fleet.md)."""
        if time.monotonic() < self._next_clock_check:
            return
        self._next_clock_check = time.monotonic() + self.clock_check_s
        try:
            self.engine.check_clock()
        except DurablyError as exc:
            log.warning("durably worker: cannot read the database's clock (%s)", exc)

    def _claim(self) -> RunRecord | None:
        full = frozenset(
            q
            for q, lim in self.engine.queue_limits().items()
            if lim.worker_concurrency is not None and self._per_queue[q] >= lim.worker_concurrency
        )
        try:
            return self.engine.claim_next(self.queues, full)
        except DurablyError as exc:
            # A database that is down or busy: wait and try again, never crash the worker.
            log.warning("durably worker: cannot claim (%s); retrying", exc)
            self._stopping.wait(ERROR_BACKOFF_S)
            return None

    def _start(self, pool: ThreadPoolExecutor, run: RunRecord) -> None:
        # starts > 1: an earlier start ended before the run did. Mostly a park (a timer, a
        # signal) that is due now, an ordinary resume: "taking over" would read as a crash.
        # A takeover from a dead or stalled owner is in the run's own lease.expired /
        # lease.lost events (`durably runs tail RUN`).
        log.info(
            "durably worker: claimed run %s (%s, start %d%s)",
            run.run_id,
            run.workflow,
            run.starts,
            ", resuming from its journal" if run.starts > 1 else "",
        )
        with self._lock:
            self.stats.claimed += 1
            self._per_queue[run.queue] += 1
        fut = pool.submit(self._drive, run)
        with self._lock:
            self._futures.add(fut)
        fut.add_done_callback(self._done)

    def _done(self, fut: Future[None]) -> None:
        with self._lock:
            self._futures.discard(fut)

    def _drive(self, run: RunRecord) -> None:
        try:
            self.engine.execute_claimed(run)
            log.info("durably worker: run %s completed", run.run_id)
            self._count("completed")
        except RunParked as exc:
            # Not an error: the run is a row now (no thread, process or slot held while it
            # waits); a claim takes it again when it is due.
            log.info("durably worker: run %s parked (%s)", run.run_id, exc.reason)
            self._count("parked")
        except StaleLease as exc:
            if exc.taken:  # the journal refused its token (after a pause, says so too)
                after = f" ({exc.reason})" if exc.reason else ""
                log.warning(
                    "durably worker: lost run %s to another worker; stopped it%s", run.run_id, after
                )
            else:  # its own deadline passed (a pause): maybe no one else has it yet
                log.warning("durably worker: lost run %s: %s", run.run_id, exc)
            self._count("stale")
        except WorkflowFailed as exc:
            log.info("durably worker: run %s failed: %s", run.run_id, exc)
            self._count("failed")
        except Cancelled as exc:
            # An outcome someone asked for (engine.cancel), not an error of the worker.
            reason = exc.reason if exc.reason else "no reason given"
            log.info("durably worker: run %s cancelled: %s", run.run_id, reason)
            self._count("cancelled")
        except StoreError as exc:
            # The journal failed while recording (after retries): the run stopped where it
            # was and stays resumable; one line, not a traceback.
            log.warning("durably worker: run %s paused, journal error: %s", run.run_id, exc)
            self._count("store_error")
        except DurablyError as exc:  # blocked, in doubt, quarantined
            log.warning("durably worker: run %s stopped: %s", run.run_id, exc)
            self._count(type(exc).__name__)
        except Exception:
            log.exception("durably worker: run %s raised unexpectedly", run.run_id)
            self._count("error")
        finally:
            with self._lock:
                self._per_queue[run.queue] -= 1
            self._slots.release()

    def _count(self, what: str) -> None:
        with self._lock:
            if what in ("completed", "failed", "cancelled", "stale"):
                setattr(self.stats, what, getattr(self.stats, what) + 1)
            else:
                self.stats.other[what] += 1

    def _drain(self, pool: ThreadPoolExecutor) -> None:
        deadline = time.monotonic() + self.drain_s
        while time.monotonic() < deadline:
            with self._lock:
                if not self._futures:
                    break
            time.sleep(0.02)
        given_back = self.engine.abandon_active()
        if given_back:
            log.warning(
                "durably worker: released %d unfinished run(s): %s",
                len(given_back),
                ", ".join(given_back),
            )
        pool.shutdown(wait=False, cancel_futures=True)
