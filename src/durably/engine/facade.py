"""``durably.Engine``: the public facade of the engine.

Every method checks nothing and decides nothing itself: it delegates to the room that
does the job (registry, create, attempt, drive, leases, queues, admin, reads, messages),
so the public docstrings live here and the mechanics live in one place each. ``engine.run``
creates or finds the run, claims it under a lease with a new fencing token (so two
processes can never drive one run), loads its whole history in one query, and runs the
workflow function from the top: recorded positions replay, the first unrecorded one goes
live. The outcome (result, failure, block, doubt) is recorded in one fenced transaction.
"""

from __future__ import annotations

import dataclasses
import datetime
import inspect
import os
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .. import runlist
from ..budget import Budget, Spend
from ..clock import Clock, SystemClock
from ..events import FOLLOW_POLL_S_DEFAULT, EventPage, Follow
from ..history import RunRecord, StepRecord
from ..journal.text import utc_text as utc_text
from ..limits import EVENTS_PAGE_MAX as EVENTS_PAGE_MAX
from ..limits import LEASE_WAIT_MAX_S as LEASE_WAIT_MAX_S
from ..replay.kernel import FaultHook
from ..store import retry
from ..store.base import Generation, Store
from ..store.open import open_store
from ..store.retained import Redaction, Tombstone
from .attempt import Attempts, decode_input, park_reason
from .base import Base
from .create import Creator
from .drive import Driver
from .handle import Handle
from .leases import Leases
from .options import (
    DEFAULT_URL,
    HISTORY_MAX_DEFAULT,
    HISTORY_WARN_DEFAULT,
    LEASE_S_DEFAULT,
    MAX_STARTS_DEFAULT,
    check_options,
    refuse_misspelt_options,
)
from .queues import QueueLimits, Queues
from .registry import Registry, Workflow, newest, version_key
from .retention import PruneReport, Retention, check_retain, finished_before_time

if TYPE_CHECKING:
    from ..approvals import ApprovalRow, Decision, PendingApproval
    from ..runlist import LiveWorker, RunPage
    from .admin import Admin
    from .messages import Messages
    from .reads import Reads

T = TypeVar("T")

__all__ = [
    "DEFAULT_URL",
    "EVENTS_PAGE_MAX",
    "LEASE_S_DEFAULT",
    "LEASE_WAIT_MAX_S",
    "MAX_STARTS_DEFAULT",
    "Engine",
    "Handle",
    "QueueLimits",
    "Workflow",
    "newest",
    "park_reason",
    "version_key",
]


class _Option(Generic[T]):
    """An engine option as an attribute of the facade, read from (and written to) the
    options the rooms share."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, engine: Engine, owner: type | None = None) -> T:
        value: T = getattr(engine._base.opts, self.name)
        return value

    def __set__(self, engine: Engine, value: T) -> None:
        changed: dict[str, Any] = {self.name: value}
        engine._base.opts = dataclasses.replace(engine._base.opts, **changed)


class Engine:
    """Registry of workflows and driver of runs on one journal database.

    ``url`` is ``sqlite:///path`` (default ``sqlite:///durably.db``, or ``DURABLY_URL``)
    or ``postgresql://...``. ``lease_s`` is how long a claim lasts without a heartbeat
    (renewed every ``heartbeat_s``, default a third of it); ``max_starts`` is how many
    starts without progress a run gets before it is quarantined. ``store_retry_s`` bounds
    (in waits summed) how long a recording call retries a transient store error (busy,
    dropped connection, disk full) before the run stops, resumable, and the ``StoreError``
    reaches the caller. ``fault_hook`` is the
    fault-injection hook used by ``durably chaos`` (off by default, free when off).
    ``wait_for_lease`` (default True): when ``run`` finds its run leased by another
    owner, it follows that run and returns (or raises) its outcome as soon as it ends: a
    live owner's run to its end, a dead-looking owner on another host's until its lease
    expires (logging why), then takes it over; False raises ``RunLeased`` at once
    instead.
    ``park_wait_s`` bounds how long ``run``/``run_async``/``resume`` wait in this process
    for a parked run to be due (a timer; default None: as long as it takes); past it they
    raise ``RunParked`` and the run stays parked for a worker (or the next call). It is an
    engine option, never a keyword of ``engine.run`` (those go to the workflow).
    ``durability`` says what an acknowledged record survives (DESIGN "Durability
    modes", docs/durability.md): ``"power"`` (the default: power loss; every commit
    fsync'd), ``"process"`` (a process crash, not an OS crash: no fsync per commit) or
    ``"effects"`` (pure steps ride along; an fsync before every effect's intent, at every
    park and at the end). A store option that contradicts it (SQLite ``synchronous=``)
    is a ``ConfigError``; ``engine.durability`` is the mode in force.
    ``history_warn`` and ``history_max`` bound a run's current generation, as
    ``(records, bytes)`` (default ``(10_000, 10 MiB)`` and ``(50_000, 50 MiB)``; None: no
    bound): past the warning the run gets one ``run.history_warning`` event per
    generation and a log line; at the limit the next recording call raises
    ``durably.HistoryTooLarge`` before writing (catch it and ``ctx.continue_as_new``;
    uncaught, the run is ``blocked``). Counted in the driver from what it loads and
    writes, with no query of its own.
    ``retain_finished`` (a timedelta, default None: keep every run) lets this engine's
    workers prune runs that finished longer ago than that (:meth:`prune`, one bounded
    batch a minute, one pruner per journal at a time; docs/retention.md).
    Other keyword options go to the store: ``synchronous``, ``busy_timeout_s`` and
    ``create`` for SQLite; ``pool_min``, ``pool_max`` and ``connect_timeout_s`` for
    PostgreSQL. An option the store does not take is a ``ConfigError`` naming the ones it
    does, never silently ignored.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        clock: Clock | None = None,
        lease_s: float = LEASE_S_DEFAULT,
        heartbeat_s: float | None = None,
        max_starts: int = MAX_STARTS_DEFAULT,
        fault_hook: FaultHook | None = None,
        wait_for_lease: bool = True,
        store_retry_s: float = retry.STORE_RETRY_S_DEFAULT,
        park_wait_s: float | None = None,
        durability: str | None = None,
        history_warn: tuple[int, int] | None = HISTORY_WARN_DEFAULT,
        history_max: tuple[int, int] | None = HISTORY_MAX_DEFAULT,
        retain_finished: datetime.timedelta | None = None,
        **store_options: Any,
    ) -> None:
        opts = check_options(
            url or os.environ.get("DURABLY_URL") or DEFAULT_URL,
            clock or SystemClock(),
            lease_s=lease_s,
            heartbeat_s=heartbeat_s,
            max_starts=max_starts,
            fault_hook=fault_hook,
            wait_for_lease=wait_for_lease,
            store_retry_s=store_retry_s,
            park_wait_s=park_wait_s,
            history_warn=history_warn,
            history_max=history_max,
        )
        refuse_misspelt_options(store_options, _OWN_OPTIONS)
        check_retain(retain_finished)
        self._base = Base(opts, open_store(opts.url, opts.clock, durability, **store_options))
        self._durability: str = self._base.store.durability
        self._registry = Registry()
        self._leases = Leases(self._base)
        self._attempts = Attempts(self._base, self._leases)
        self._create = Creator(self._base, self._registry)
        self._driver = Driver(self._base, self._registry, self._attempts)
        active = self._attempts.active
        self._queues = Queues(self._base, self._registry, self._create, self._leases, active)
        self._retention = Retention(self._base, retain_finished)
        self._rooms_lock = threading.Lock()
        self._outside_rooms: tuple[Admin, Reads, Messages] | None = None

    # The rooms a run's own path never uses (retry/fork/cancel/recover, the list and read
    # methods, signals and approvals sent from outside) are imported and built together at
    # the first use of one: a process that only resumes runs never loads them (issue 28).
    @property
    def _admin(self) -> Admin:
        return self._outside()[0]

    @property
    def _reads(self) -> Reads:
        return self._outside()[1]

    @property
    def _messages(self) -> Messages:
        return self._outside()[2]

    def _outside(self) -> tuple[Admin, Reads, Messages]:
        rooms = self._outside_rooms
        if rooms is None:
            from .admin import Admin
            from .messages import Messages
            from .reads import Reads

            with self._rooms_lock:
                if self._outside_rooms is None:
                    active = self._attempts.active
                    admin = Admin(self._base, self._registry, self._create, self._driver, active)
                    self._outside_rooms = (admin, Reads(self._base), Messages(self._base))
                rooms = self._outside_rooms
        return rooms

    # The options, as attributes (engine.url, engine.lease_s, ...): each reads the options
    # every room shares, and setting one (tests switch fault_hook) replaces them there.
    url: _Option[str] = _Option()
    clock: _Option[Clock] = _Option()
    lease_s: _Option[float] = _Option()
    heartbeat_s: _Option[float] = _Option()
    max_starts: _Option[int] = _Option()
    fault_hook: _Option[FaultHook | None] = _Option()
    wait_for_lease: _Option[bool] = _Option()
    store_retry_s: _Option[float] = _Option()
    park_wait_s: _Option[float | None] = _Option()
    history_warn: _Option[tuple[int, int] | None] = _Option()
    history_max: _Option[tuple[int, int] | None] = _Option()

    @property
    def durability(self) -> str:
        """The durability mode in force: ``"power"``, ``"process"`` or ``"effects"``
        (given, or the one a SQLite ``synchronous=`` given alone keeps)."""
        return self._durability

    @property
    def store(self) -> Store:
        """The journal's store (tests wrap it to inject faults: the rooms read it at each
        call)."""
        return self._base.store

    @store.setter
    def store(self, store: Store) -> None:
        self._base.store = store

    # -- registry ------------------------------------------------------------------------

    def workflow(
        self,
        name: str | None = None,
        version: str | None = None,
        prompt_version: str | None = None,
        *,
        budget: Budget | None = None,
    ) -> Callable[[Callable[..., Any]], Workflow]:
        """Register a workflow function; its first parameter receives the context.

        ``name`` defaults to the function's qualified name. ``version`` routes runs to
        workers that serve it (only when set); ``prompt_version`` is recorded for
        information. ``budget=durably.Budget(tokens=..., cost_usd=...)`` limits each
        run's spend, as if the workflow called ``ctx.budget(...)`` first (a later
        ``ctx.budget`` call wins).
        """
        return self._registry.workflow(name, version, prompt_version, budget)

    def served(self) -> dict[str, frozenset[str | None]]:
        """The versions this engine registers per workflow name (None: the registration
        without a version); a worker claims only runs it can drive."""
        return self._registry.served()

    def workflows(self) -> list[Workflow]:
        """Every registration of this engine (one per workflow name and version), sorted
        by name, then version (the registration without a version first); what
        ``durably audit`` reads."""
        return self._registry.workflows()

    # -- running -------------------------------------------------------------------------

    def run(
        self, wf: Workflow | str, /, *args: Any, run_id: str | None = None, **kwargs: Any
    ) -> Any:
        """Run a workflow to its end in this process and return its result.

        A new ``run_id`` (default: a fresh UUID) starts a run; an existing one resumes it
        from its journal, and a finished one returns (or raises) its recorded outcome
        without executing anything. A failed run raises ``WorkflowFailed``. When the run
        parks (``ctx.sleep``), this waits in-process (holding no lease) until it is due
        and replays it; ``park_wait_s`` bounds that wait (then ``RunParked``). A parked
        run found here (a crash during the wait) is waited for until its recorded wake
        time, never a fresh one.
        """
        w, run = self._create.prepare_resolved(wf, args, kwargs, run_id)
        return self._driver.drive_to_end(w, run)

    async def run_async(
        self, wf: Workflow | str, /, *args: Any, run_id: str | None = None, **kwargs: Any
    ) -> Any:
        """:meth:`run` for use inside a running event loop (sync workflows run inline);
        a parked run is waited for in a thread, so the loop goes on meanwhile."""
        w, run = self._create.prepare_resolved(wf, args, kwargs, run_id)
        return await self._driver.drive_to_end_async(w, run)

    def resume(self, run_id: str) -> Any:
        """Drive an existing run with the input it was started with (waiting in-process
        while it is parked, like :meth:`run`)."""
        return self._driver.resume(run_id, wait=True)

    # -- reads ---------------------------------------------------------------------------

    def get_run(self, run_id: str) -> RunRecord:
        """The run's record; raises ``RunNotFound``."""
        return self._base.get_run(run_id)

    def spend(self, run_id: str) -> Spend:
        """The run's spend (the spend ledger's sums across generations: every call that
        reported ``durably.usage``, repeated and failed attempts included) and its stored
        budget; raises ``RunNotFound``."""
        return self._reads.spend(run_id)

    def generations(self, run_id: str) -> list[Generation]:
        """The run's finished generations, oldest first (each ended ``continued`` by
        ``ctx.continue_as_new``: its number, input, records and end time); empty for a
        run that never continued as new. ``RunNotFound`` for an unknown run."""
        self._base.get_run(run_id)
        return self._base.call(lambda: self._base.store.list_generations(run_id))

    def history(self, run_id: str, generation: int | None = None) -> list[StepRecord]:
        """The run's history in program order: its current generation's, or
        ``generation``'s (an earlier one, before a ``continue_as_new``, until pruned).
        Raises ``RunNotFound``, and ``ConfigError`` for a generation the run does not
        have (not an int from 0 to its current one)."""
        return self._base.history(run_id, generation)

    def list_runs(
        self,
        *,
        status: str | Sequence[str] | None = None,
        workflow: str | None = None,
        version: str | None = None,
        queue: str | None = None,
        search: str | None = None,
        after: str | None = None,
        limit: int = runlist.LIST_RUNS_LIMIT_DEFAULT,
        since: float | None = None,
    ) -> RunPage:
        """One page of runs, newest first (then by run id), at most ``limit`` (1 to
        ``LIST_RUNS_LIMIT_MAX``). Filters combine: ``status`` one run status or a list of
        them, ``workflow``, ``version``, ``queue``, ``search`` (a substring of the run id,
        case-sensitive, ``%`` and ``_`` taken literally), ``since`` (created at or after,
        epoch seconds). Pass the page's ``next`` as ``after`` with the same filters for
        the next page (None on the last page): pages are keyset-paged, so a run created
        meanwhile never makes a run repeat or go missing. A bad argument raises
        ``ConfigError`` saying what to pass."""
        return self._reads.list_runs(
            status=status,
            workflow=workflow,
            version=version,
            queue=queue,
            search=search,
            after=after,
            limit=limit,
            since=since,
        )

    def count_runs(
        self,
        *,
        workflow: str | None = None,
        version: str | None = None,
        queue: str | None = None,
        search: str | None = None,
        since: float | None = None,
    ) -> dict[str, int]:
        """How many runs have each status, with ``list_runs``'s filters: every run status
        is a key (zeros included), in the order of a run's life (queued, running, parked,
        in_doubt, blocked, quarantined, completed, failed, cancelled, continued)."""
        return self._reads.count_runs(
            workflow=workflow, version=version, queue=queue, search=search, since=since
        )

    def runs_by_version(self) -> list[tuple[str, str | None, str, int]]:
        """Runs not finished (not completed, failed, cancelled or continued), counted per
        ``(workflow, version, status, count)`` and ordered by them (no version first):
        what each version's workers must still drive before they can be stopped
        (``durably runs list --by-version``)."""
        return self._reads.runs_by_version()

    def blobs(self, digests: Sequence[str]) -> dict[str, str]:
        """The stored blobs among ``digests`` (the sha256 content hashes a record's
        inputs or output refer to), as their JSON text by digest; a digest not stored
        (pruned, or never written) is left out."""
        return self._reads.blobs(digests)

    def live_workers(self, queue: str | None = None) -> list[LiveWorker]:
        """The workers whose heartbeat row has not expired (serving ``queue`` when given),
        less those on this host whose pid is provably gone; at most ``WORKERS_MAX``. A
        worker on another host killed since its last beat is listed until its row
        expires."""
        return self._reads.live_workers(queue)

    def events(self, run_id: str, after: int = 0, limit: int = 1000) -> EventPage:
        """One page of the run's event stream: events with cursor > ``after``, oldest
        first, at most ``limit``; pass the page's ``cursor`` as ``after`` to read on
        (no gap, no repeat). Raises ``RunNotFound``."""
        return self._reads.events(run_id, after, limit)

    def follow(self, run_id: str, after: int = 0, poll_s: float = FOLLOW_POLL_S_DEFAULT) -> Follow:
        """Follow the run's stream live: one object for both ``for`` and ``async for``,
        yielding every event after ``after`` and ending once the run finishes. Woken by
        LISTEN/NOTIFY on PostgreSQL, a ``poll_s`` poll on SQLite. Raises ``RunNotFound``
        (at once, not on the first ``next``)."""
        return self._reads.follow(run_id, after, poll_s)

    # -- signals and approvals -----------------------------------------------------------

    def signal(self, run_id: str, name: str, data: Any = None) -> int:
        """Send signal ``name`` with ``data`` (JSON-encodable, at most
        ``SIGNAL_DATA_BYTES_MAX`` as JSON) to the run and return its per-run sequence
        number (1, 2, ...).

        The signal is durable once this returns. The run's ``ctx.wait_for_signal(name)``
        calls consume the signals of that name oldest first, each once; one sent before
        the wait is reached is kept for it. A run parked waiting for ``name`` wakes at
        once (PostgreSQL notifies the workers; SQLite workers see it at their next poll).
        Any process may signal. Raises ``RunNotFound`` for an unknown run and
        ``RunFinished`` for one already completed, failed, cancelled or continued.
        """
        with self._base.pruned_for_not_found(run_id):
            return self._messages.signal(run_id, name, data)

    def pending_approvals(self, run_id: str | None = None) -> list[PendingApproval]:
        """Approval requests waiting for a person (of one run, or of all runs still going),
        oldest first, at most ``APPROVALS_LIST_MAX``: each with ``run_id``,
        ``request_id``, ``action``, ``args``, ``digest``, ``requested_at`` and
        ``expires_at``. A request past its expiry stays listed until its run takes the
        expiry, but can no longer be decided. A row edited by hand so that it cannot be
        read is left out, with a warning on the ``durably`` logger naming it."""
        return self._messages.pending_approvals(run_id)

    def pending_approval_rows(self, run_id: str | None = None) -> list[ApprovalRow]:
        """The requests ``pending_approvals`` lists, as stored: each an
        ``durably.approvals.ApprovalRow`` (``args`` its canonical JSON text, times in
        seconds since the epoch), so a tool can show a hand-edited row as the text it
        holds instead of failing on it."""
        return self._messages.pending_approval_rows(run_id)

    def approval_row(self, run_id: str, request_id: str) -> ApprovalRow | None:
        """Request ``request_id`` of run ``run_id`` as stored, pending or decided (its
        ``outcome``, ``by``, ``note``, ``decided_at``), or None when there is none."""
        return self._messages.approval_row(run_id, request_id)

    def approve(
        self,
        run_id: str,
        request_id: str,
        *,
        digest: str,
        by: str | None = None,
        note: str | None = None,
    ) -> Decision:
        """Approve the request ``request_id`` (its position, e.g. ``"3"``) of the run and
        wake the run; returns the recorded :class:`~durably.Decision`.

        ``digest`` must be the request's full digest (64 hex characters, as listed by
        :meth:`pending_approvals`): a digest that is not the request's raises
        ``ApprovalMismatch`` and changes nothing, so an approval is always of exactly the
        action and arguments that were shown. A request already decided (or past its
        expiry) raises ``ApprovalAlreadyDecided`` naming who decided and when; an unknown
        run ``RunNotFound``, an unknown request ``ApprovalNotFound``, a finished run (or
        one being cancelled, which never uses a decision) ``RunFinished``.
        """
        from ..approvals import APPROVED  # loaded with the messages room anyway

        with self._base.pruned_for_not_found(run_id):
            return self._messages.decide(
                run_id, request_id, digest, APPROVED, by, note, "engine.approve"
            )

    def reject(
        self,
        run_id: str,
        request_id: str,
        *,
        digest: str,
        by: str | None = None,
        reason: str | None = None,
    ) -> Decision:
        """Reject the request (see :meth:`approve`; the same checks): the workflow's
        ``request_approval`` returns a Decision with outcome ``"rejected"`` and ``reason``
        as its ``note``."""
        from ..approvals import REJECTED

        with self._base.pruned_for_not_found(run_id):
            return self._messages.decide(
                run_id, request_id, digest, REJECTED, by, reason, "engine.reject"
            )

    # -- queues and workers --------------------------------------------------------------

    def start(
        self,
        wf: Workflow | str,
        /,
        *args: Any,
        run_id: str | None = None,
        queue: str = "default",
        **kwargs: Any,
    ) -> Handle:
        """Enqueue a run for workers (``durably worker module:engine``) and return its
        :class:`Handle` at once.

        Starting an existing ``run_id`` starts nothing and returns its handle; the same
        ``run_id`` with another workflow or other input raises ``RunConflict``.
        """
        w, run = self._queues.start(wf, args, kwargs, run_id, queue)
        return Handle(self, run.run_id, w)

    def queue(
        self, name: str, *, concurrency: int | None = None, worker_concurrency: int | None = None
    ) -> None:
        """Limit how many runs of queue ``name`` run at once: ``concurrency`` across the
        whole fleet, ``worker_concurrency`` within one worker process."""
        self._queues.set_limits(name, concurrency, worker_concurrency)

    def claim_next(
        self, queues: list[str], skip_queues: frozenset[str] = frozenset()
    ) -> RunRecord | None:
        """Claim the next runnable run of ``queues`` this engine can execute (for workers)."""
        return self._queues.claim_next(queues, skip_queues)

    def execute_claimed(self, run: RunRecord) -> Any:
        """Drive a run this process has just claimed (for workers); returns its result or
        raises like :meth:`run`."""
        return self._driver.execute_claimed(run)

    def abandon_active(self) -> list[str]:
        """Give back every run this process is driving (for a worker past its drain
        deadline): their cores stop at the next step and their leases are released so
        another worker takes them at once. Returns the run ids."""
        return self._queues.abandon_active()

    def queue_limits(self) -> dict[str, QueueLimits]:
        """The limits set with :meth:`queue`, per queue name (a copy), for workers: a
        worker claims no run of a queue whose ``worker_concurrency`` it has reached."""
        return self._queues.limits()

    def wait_for_work(self, timeout_s: float) -> bool:
        """Block until new work may be runnable (PostgreSQL: a NOTIFY from a run created,
        released, woken or requeued: True) or ``timeout_s`` passed (SQLite: a plain wait;
        False), for a worker that found nothing to claim."""
        return self._queues.wait_for_work(timeout_s)

    def beat_worker(self, queues: Sequence[str]) -> None:
        """Record this process in the journal's workers table as a live worker serving
        ``queues``, for one lease (``lease_s``); a worker beats every third of a lease,
        and its row expires a lease after its last beat (``engine.live_workers()``)."""
        self._queues.beat_worker(queues)

    def drop_worker(self) -> None:
        """Remove this process's row from the workers table (a worker that stops)."""
        self._queues.drop_worker()

    def check_clock(self) -> float | None:
        """Compare this host's clock with the database's and warn (``durably`` logger)
        past ``durably.limits.CLOCK_SKEW_WARN_S``: leases and key expiry compare times
        written by different hosts. Returns the skew in seconds (positive: this host is
        ahead), or None when the database has no clock of its own (SQLite)."""
        return self._queues.check_clock()

    # -- for tools replaying a run (durably replay --check) ------------------------------

    def registration_for(self, run: RunRecord) -> Workflow:
        """The registration that drives ``run``: the version it recorded (a run without
        one: the registration without a version, else the newest). Raises
        ``WorkflowNotRegistered`` naming the version when this engine lacks it."""
        return self._registry.for_run(run)

    def recorded_input(self, run: RunRecord) -> tuple[list[Any], dict[str, Any]]:
        """The arguments ``run`` was started with, decoded and typed for its
        registration (:meth:`registration_for`) as a resume sees them. Raises
        ``SerializationError`` when they cannot be (the input does not match the sha256
        it was created with, or no longer fits the workflow's parameters)."""
        return decode_input(self._registry.for_run(run), run)

    # -- operator actions ----------------------------------------------------------------

    def retry(self, run_id: str) -> RunRecord:
        """A person's decision to try a stuck or failed run again; returns the queued run.

        A ``failed`` run re-opens at its failed position: every recorded step replays (a
        model call paid for is not paid again), the step whose failure ended the run runs
        again with the same idempotency key, and the failure outcome is cleared; a run
        whose workflow raised without a failed step re-runs from its replay. A failed run
        whose saga compensated is refused (``ConfigError`` naming the ``durably fork`` to
        use instead): its undone steps would replay as done. For an
        ``in_doubt`` run the step in doubt runs again (with the same key: check the
        receiving system first). A ``quarantined`` run gets a fresh count of starts and a
        ``blocked`` one is queued (fix its code first); both keep their effect intents, so
        an effect that may have happened still parks ``in_doubt`` rather than run twice.
        The run keeps its incarnation, so every key stays. A cancel asked for before the
        run stopped, which it never unwound for, is cleared: the retry is the later
        decision (cancel again to stop it). It continues the next time it is driven:
        ``engine.run(..., run_id=run_id)``, ``engine.resume(run_id)`` or a worker.
        """
        return self._admin.retry(run_id)

    def cancel(self, run_id: str, reason: str | None = None) -> RunRecord:
        """Cancel a run, from any process or machine; returns the run as it is after.

        A durable flag, not a status, until the workflow has unwound: the run's driver
        sees it at its next step boundary (the append of each step reads it, at no extra
        query) or when it claims the run, and the workflow gets ``durably.Cancelled``
        (``.reason``) at its next recording call that would go live; it is latched, so
        every later recording call raises it again (cleanup in ``except``/``finally``
        can ``ctx.emit`` and return, never run another live step). The run then ends
        ``cancelled`` with ``reason`` as its message, whatever the workflow did, and
        ``engine.run`` raises ``Cancelled``. A parked run is woken to unwind. A run
        that cannot run again without a person ends ``cancelled`` at once, without its
        cleanup: ``queued`` with nothing recorded yet, ``blocked``, ``quarantined``,
        ``in_doubt`` (to let it clean up, ``retry`` it first, then cancel it).

        A cancel that arrives after the workflow's last recording call lets it complete.
        Cancelling a cancelled run, or one whose cancel was asked for already, changes
        nothing (the first reason stays). Raises ``RunNotFound``, and ``RunFinished`` for
        a run that completed, failed or continued. ``reason`` is cut to
        ``CANCEL_REASON_CHARS_MAX`` characters.
        """
        with self._base.pruned_for_not_found(run_id):
            return self._admin.cancel(run_id, reason)

    def fork(self, run_id: str, *, at: int, new_run_id: str | None = None) -> Handle:
        """Start a new run that replays ``run_id`` up to top-level position ``at`` and goes
        live from there (Temporal's reset, DBOS's fork); returns its :class:`Handle`.

        The new run has the same workflow, version and input, a new incarnation (so new
        idempotency keys) and a copy of the original's recorded results (outputs and
        failures, recorded times, random numbers and uuids, everything under a gather) at
        the positions below ``at``; intents are never copied. **A fork never carries a
        decision**: when an approval request below ``at`` was decided (approved, rejected
        or expired), the fork copies only the positions below that request and goes live
        there, so the request parks for a new decision by a person (see
        ``reopen.fork_at``). **Every effect from where the fork goes live happens again,
        under new keys**: a receiving side cannot tell it from the original's and will
        perform it. The run is queued for workers;
        ``handle.result()`` waits for one, or drive it here with ``engine.resume(new)``.
        Raises ``ConfigError`` for a bad ``at`` (not a top-level position of the
        history, or past an effect in doubt) and ``RunConflict`` when ``new_run_id``
        exists. The original run is not changed.
        """
        forked, w = self._admin.fork(run_id, at, new_run_id)
        return Handle(self, forked.run_id, w)

    # -- retention -----------------------------------------------------------------------

    def prune(
        self,
        finished_before: datetime.timedelta | datetime.datetime | float,
        status: str | Sequence[str] | None = None,
        dry_run: bool = False,
    ) -> PruneReport:
        """Delete the runs that finished before ``finished_before`` (a timedelta: that
        long ago; an aware datetime; or seconds since the epoch), with every generation's
        records, events, signals, approvals and spend rows, then the blobs no remaining
        run cites; returns what went (:class:`PruneReport`).

        ``status`` limits it to some of ``completed``, ``failed``, ``cancelled`` (default
        all three). A run that is not finished (queued, running, parked, blocked, in
        doubt, quarantined) is never touched: each batch re-reads its runs under their
        locks. It works in bounded batches, each its own transaction. Each run leaves a
        tombstone: running its id again with the same input raises ``RunPruned`` (never a
        silent fresh run repeating its effects), with other input ``RunConflict``.
        ``dry_run`` reads the same and changes nothing. On SQLite the file does not
        shrink by itself (docs/retention.md: ``incremental_vacuum``).
        """
        return self._retention.prune(finished_before, status, dry_run)

    def delete_run(
        self, run_id: str, redact: bool = False, *, by: str | None = None
    ) -> PruneReport:
        """Forget one finished run (``completed``, ``failed`` or ``cancelled``; a live run
        raises ``RunNotFinished``: cancel it and let it reach ``cancelled`` first).

        Without ``redact`` the run goes now, every generation, leaving its tombstone (as
        :meth:`prune`). With ``redact`` it stays with its shape (ids, workflow, version,
        positions, step names, kinds, statuses, attempts, keys, timings, spend) and every
        value is replaced by a marker: inputs and their digests, outputs, error messages,
        park and cancel reasons, events' data, signal data, approval actions, arguments
        and names, and the blobs no other run cites are deleted. A redacted run raises
        ``RunRedacted`` from ``run``, ``start``, ``resume``, ``retry``, ``fork`` and
        ``replay --check``; ``by`` (who asked) is recorded with the time. Old row
        versions stay in the database files until vacuumed (docs/retention.md).
        """
        return self._retention.delete_run(run_id, redact, by)

    def list_tombstones(
        self, limit: int = 100, after: tuple[float, str] | None = None
    ) -> list[Tombstone]:
        """The tombstones of pruned and deleted runs, newest first (``durably runs list
        --pruned``); ``after`` is the last one's ``(removed_at, run_id)``."""
        return self._base.store.list_tombstones(limit, after)

    def prune_tombstones(
        self,
        removed_before: datetime.timedelta | datetime.datetime | float,
        dry_run: bool = False,
    ) -> int:
        """Remove the tombstones of runs removed before ``removed_before``; returns how
        many (``dry_run``: how many would go, nothing removed). Their run ids can then
        start fresh runs, whose effects get new keys."""
        before = finished_before_time(
            removed_before, self._base.opts.clock.time(), "removed_before"
        )
        return self._base.store.drop_tombstones(before, bool(dry_run))

    def redaction(self, run_id: str) -> Redaction | None:
        """When and by whom the run was redacted (``delete_run(..., redact=True)``), or
        None when it was not."""
        self._base.known_run_id(run_id)
        return self._base.store.get_redaction(run_id)

    def apply_retention(self) -> PruneReport | None:
        """One background prune for ``retain_finished`` (workers call it in their loop):
        at most one a minute, only while this process holds the journal's prune lease;
        None when it did not run."""
        return self._retention.tick()

    def skip(self, run_id: str, output: Any, position: str | None = None) -> RunRecord:
        """Record ``output`` as the result of the ``in_doubt`` step without running it
        again; returns the queued run. ``position`` defaults to the step the run is in
        doubt about (the one ``runs show`` names); other intents kept by a retry are not
        in doubt yet (each still meets its own key, reconcile or doubt check)."""
        return self._admin.skip(run_id, output, position)

    def recover(self) -> dict[str, Any]:
        """Resume every run whose owner was a process of this host that is gone (call it
        at startup, like DBOS's recovery): runs of the workflow versions this engine
        registers (a run of another version is left to a process that has it) left
        ``running`` by a crash here, and, once their leases expire (this waits), by an
        earlier boot of this machine; and parked runs whose wake-up is due (a process
        that died waiting in ``engine.run`` leaves them parked, with no owner). A resumed
        run that parks on a wake-up due within ``durably.limits.RECOVER_WAIT_S`` is
        waited for and resumed. Returns each resumed run id mapped to its result, or to
        the ``DurablyError`` that stopped it (``WorkflowFailed``, ``RunInDoubt``, ...;
        ``RunParked`` for one left parked on a later wake-up). A run another process
        takes first is left to it (see :mod:`durably.recovery`).
        """
        return self._admin.recover()

    def close(self) -> None:
        """Stop lease keeping and close the store's connections."""
        self._leases.close()
        self._base.store.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# The engine's own keyword options (a misspelt store option is matched against them).
_OWN_OPTIONS = [
    n
    for n, p in inspect.signature(Engine.__init__).parameters.items()
    if p.kind is inspect.Parameter.KEYWORD_ONLY
]
