"""The engine: a registry of workflows and the loop that drives one run.

``engine.run`` creates or finds the run, claims it under a lease with a new fencing token
(so two processes can never drive one run), loads its whole history in one query, and runs
the workflow function from the top: recorded positions replay, the first unrecorded one
goes live. The outcome (result, failure, block, doubt) is recorded in one fenced
transaction.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import logging
import math
import os
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn, TypeVar

from . import codec, reopen, runlist
from ._fork import reset_after_fork
from .approvals import (
    APPROVED,
    REJECTED,
    ApprovalRow,
    Decision,
    PendingApproval,
    pending_list,
)
from .approvals import check_text as check_approval_text
from .budget import Budget, Spend
from .clock import Clock, SystemClock
from .context import AsyncContext, Context, workflow_body
from .errors import (
    Cancelled,
    CompensationFailed,
    ConfigError,
    DurablyError,
    LeaseLost,
    RunBlocked,
    RunConflict,
    RunFinished,
    RunInDoubt,
    RunLeased,
    RunNotFound,
    RunParked,
    RunQuarantined,
    SerializationError,
    StaleLease,
    StoreError,
    StoreFailed,
    WorkflowFailed,
    WorkflowNotRegistered,
)
from .events import FOLLOW_POLL_S_DEFAULT, EventPage, Follow
from .features import budgets
from .history import (
    BLOCKED,
    CANCEL_REASON_CHARS_MAX,
    CANCELLED,
    COMPLETED,
    ERROR_MESSAGE_CHARS_MAX,
    FAILED_RUN,
    IN_DOUBT,
    KEY_CHARS_MAX,
    PARK_REASON_CHARS_MAX,
    PARKED,
    QUARANTINED,
    QUEUED,
    RUN_ID_CHARS_MAX,
    RUN_INPUT_BYTES_MAX,
    RUN_RESULT_BYTES_MAX,
    RUNNING,
    SIGNAL_DATA_BYTES_MAX,
    STEP_OUTPUT_BYTES_MAX,
    RunRecord,
    StepRecord,
    check_name,
    check_text,
    describe_error,
    position_key,
    storable_text,
    unstorable,
)
from .journal.text import utc_text as utc_text
from .limits import EVENTS_PAGE_MAX as EVENTS_PAGE_MAX
from .limits import LEASE_WAIT_MAX_S as LEASE_WAIT_MAX_S
from .ownership import (
    LeaseWait,
    describe_owner,
    lease_wait,
    orphans_of_this_host,
    owner_dead,
)
from .redact import redact_url
from .replay.kernel import FaultHook, RunCore, cancelled_error, type_name
from .replay.park import Parked
from .replay.setup import RunSetup
from .runlist import LiveWorker, RunPage
from .runtime.drive import Executor, drive_async, drive_sync, recording
from .shell import command
from .store import retry
from .store.base import NewRun, Owner, Store
from .store.open import open_store
from .store.rules import CANCEL_ERROR_TYPE, check_requeueable

T = TypeVar("T")

# Runs this process stopped driving but could not release (the store failed): its own
# claim may take them over at once instead of waiting lease_s for its own lease.
_UNRELEASED: set[tuple[str, str]] = set()

DEFAULT_URL = "sqlite:///durably.db"
LEASE_S_DEFAULT = 30.0
MAX_STARTS_DEFAULT = 10
LEASE_WAIT_SLACK_S = 0.05  # past the lease's expiry, so the claim after the wait finds it over
PARK_WAIT_SLICE_S = 1.0  # longest real-time wait between looks at a parked run's row
FOLLOW_POLL_S = 0.05  # between looks at a run another process is driving (engine.run)
# What a parked run can wait for (Parked.reason); "in_doubt" waits for a person instead.
# "waits": several at once (ctx.gather branches that each parked; see replay.park.combine_parks).
PARK_KINDS = frozenset({"timer", "signal", "approval", "waits"})

_log = logging.getLogger("durably")


@dataclass(frozen=True)
class Workflow:
    """A registered workflow function."""

    name: str
    version: str | None
    prompt_version: str | None
    fn: Callable[..., Any]
    is_async: bool
    return_hint: Any = None
    param_hints: dict[str, Any] = field(default_factory=dict)

    # Set on the copy at_version() returns: a new run takes exactly this version.
    pinned: bool = field(default=False, compare=False)
    # The run's spending limit (``budget=``), applied at the top of every claim as if the
    # workflow called ctx.budget first.
    budget: Budget | None = None

    def __repr__(self) -> str:
        return f"<durably workflow {self.name!r} version={self.version!r}>"

    def at_version(self, version: str | None) -> Workflow:
        """This workflow's ``version`` as registered in the engine, for a new run:
        ``engine.run(wf.at_version("1"), ...)`` (without it a new run takes the newest
        version). ``None`` names the registration without a version. The engine refuses a
        version it does not register, naming it."""
        if version is not None and not isinstance(version, str):
            raise ConfigError(f"at_version takes a str or None, got {version!r:.100}")
        return dataclasses.replace(self, version=version, pinned=True)


@dataclass
class _Attempt:
    """One claim of a run: its core, executor, heartbeat and decoded input."""

    workflow: Workflow
    run: RunRecord
    core: RunCore
    executor: Executor
    heartbeat: _Heartbeat
    args: list[Any]
    kwargs: dict[str, Any]


def _refuse_misspelt_options(options: dict[str, Any]) -> None:
    """An option no store takes that is close to an option's name (``lease`` for
    ``lease_s``) is a misspelling: say which name was meant, rather than the store's list
    alone, which leaves out the engine's own options."""
    import difflib

    from .store.open import STORE_OPTIONS

    params = inspect.signature(Engine.__init__).parameters
    own = [n for n, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY]
    stores = sorted({n for names in STORE_OPTIONS.values() for n in names})
    for name in sorted(options):
        if name in stores:
            continue
        close = difflib.get_close_matches(name, own + stores, n=1, cutoff=0.6)
        if close:
            whose = "durably.Engine" if close[0] in own else "the store"
            raise ConfigError(
                f"durably.Engine takes no option {name!r}: did you mean {close[0]!r} (an"
                f" option of {whose})? The engine's own options: {', '.join(own)}; the"
                f" stores': {', '.join(stores)}"
            )


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
    ``wait_for_lease`` (default True): when ``run`` finds its run leased by an owner on
    another host that looks dead, it logs why and waits for the lease to expire; False
    raises ``RunLeased`` at once instead. A live owner on this host always raises at once.
    ``park_wait_s`` bounds how long ``run``/``run_async``/``resume`` wait in this process
    for a parked run to be due (a timer; default None: as long as it takes); past it they
    raise ``RunParked`` and the run stays parked for a worker (or the next call). It is an
    engine option, never a keyword of ``engine.run`` (those go to the workflow).
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
        **store_options: Any,
    ) -> None:
        if lease_s <= 0 or (heartbeat_s is not None and not 0 < heartbeat_s < lease_s):
            raise ConfigError("lease_s must be > 0 and 0 < heartbeat_s < lease_s")
        if max_starts < 1:
            raise ConfigError("max_starts must be >= 1")
        if not store_retry_s >= 0:
            raise ConfigError(f"store_retry_s={store_retry_s!r}: must be >= 0 (seconds)")
        self.store_retry_s = store_retry_s
        if park_wait_s is not None and (
            isinstance(park_wait_s, bool)
            or not isinstance(park_wait_s, (int, float))
            or not park_wait_s >= 0
        ):
            raise ConfigError(
                f"park_wait_s={park_wait_s!r}: must be None (wait in-process as long as a"
                " parked run needs) or a number of seconds >= 0"
            )
        if park_wait_s is not None:
            # A bound past any float (10**400) or infinity is no bound at all; kept as a
            # float, a huge int would overflow where the wait's deadline is computed.
            park_wait_s = float(park_wait_s) if park_wait_s < 1e300 else math.inf
            if math.isinf(park_wait_s):
                park_wait_s = None
        self.park_wait_s = park_wait_s
        self.url = url or os.environ.get("DURABLY_URL") or DEFAULT_URL
        self.clock: Clock = clock or SystemClock()
        self.lease_s = lease_s
        self.heartbeat_s = heartbeat_s or lease_s / 3
        self.max_starts = max_starts
        self.fault_hook = fault_hook
        self.wait_for_lease = wait_for_lease
        _refuse_misspelt_options(store_options)
        self.store: Store = open_store(self.url, self.clock, **store_options)
        self._workflows: dict[str, dict[str | None, Workflow]] = {}
        self._owner: tuple[int, Owner] | None = None
        self._queue_limits: dict[str, QueueLimits] = {}
        self._active: dict[str, _Attempt] = {}
        self._active_lock = threading.Lock()
        self._keeper = _LeaseKeeper(self.store, self.clock, self.lease_s, self.heartbeat_s)
        reset_after_fork(self)

    def _after_fork_in_child(self) -> None:
        """The runs the parent is driving are not this process's: forget them (so nothing
        here releases their leases), with a lock no parent thread can still hold."""
        self._active = {}
        self._active_lock = threading.Lock()

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
        if budget is not None and not isinstance(budget, Budget):
            raise ConfigError(
                f"@engine.workflow(budget=...) takes a durably.Budget(tokens=..., cost_usd=...),"
                f" got {budget!r:.100}"
            )

        def register(fn: Callable[..., Any]) -> Workflow:
            if not callable(fn):
                raise ConfigError("@engine.workflow() decorates a function")
            wf_name = name or fn.__qualname__
            check_name(wf_name, "the workflow name")
            _check_version(version, "version")
            _check_version(prompt_version, "prompt_version")
            versions = self._workflows.setdefault(wf_name, {})
            existing = versions.get(version)
            if existing is not None and existing.fn is not fn:
                raise ConfigError(
                    f"a workflow named {wf_name!r} with version {version!r} is already"
                    " registered; give the new code another version (versions of one name"
                    " register side by side)"
                )
            wf = Workflow(
                wf_name,
                version,
                prompt_version,
                fn,
                inspect.iscoroutinefunction(fn),
                codec.return_hint(fn),
                codec.param_hints(fn),
                budget=budget,
            )
            versions[version] = wf
            return wf

        return register

    def _resolve(self, wf: Workflow | str) -> Workflow:
        """The registration a new run of ``wf`` takes: the version pinned with
        :meth:`Workflow.at_version`, else the newest."""
        key = wf if isinstance(wf, str) else getattr(wf, "name", None)
        versions = self._workflows.get(key) if isinstance(key, str) else None
        if not versions:
            known = ", ".join(sorted(self._workflows)) or "none"
            raise WorkflowNotRegistered(
                f"workflow {getattr(wf, '__qualname__', wf)!r} is not registered with this"
                f" engine (registered: {known}); decorate it with @engine.workflow()"
            )
        if isinstance(wf, Workflow) and wf.pinned:
            return self._version_of(wf.name, wf.version, versions)
        return newest(versions)

    def _for_run(self, run: RunRecord) -> Workflow:
        """The registration that drives an existing run: the version it recorded (a run
        without one: the registration without a version, else the newest); a version
        this process lacks is refused, naming it."""
        versions = self._workflows.get(run.workflow)
        if not versions:
            return self._resolve(run.workflow)  # raises, naming what is registered
        if run.version is None:
            return versions.get(None) or newest(versions)
        return self._version_of(run.workflow, run.version, versions, run.run_id)

    def _version_of(
        self,
        name: str,
        version: str | None,
        versions: dict[str | None, Workflow],
        run_id: str | None = None,
    ) -> Workflow:
        found = versions.get(version)
        if found is None:
            what = f"run {run_id!r} is of" if run_id else "a new run asked for"
            have = ", ".join(_version_text(v) for v in sorted(versions, key=version_key))
            raise WorkflowNotRegistered(
                f"{what} workflow {name!r} version {_version_text(version)}, which this"
                f" process does not register (it has {have}); run it where that version is"
                f" registered (@engine.workflow(name={name!r}, version={version!r}))"
            )
        return found

    def served(self) -> dict[str, frozenset[str | None]]:
        """The versions this engine registers per workflow name (None: the registration
        without a version); a worker claims only runs it can drive."""
        return {name: frozenset(versions) for name, versions in self._workflows.items()}

    def workflows(self) -> list[Workflow]:
        """Every registration of this engine (one per workflow name and version), sorted
        by name, then version (the registration without a version first); what
        ``durably audit`` reads."""
        return [
            versions[v]
            for name, versions in sorted(self._workflows.items())
            for v in sorted(versions, key=version_key)
        ]

    # -- public entry points -------------------------------------------------------------

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
        w, run = self._prepare_resolved(wf, args, kwargs, run_id)
        return self._drive_to_end(w, run)

    async def run_async(
        self, wf: Workflow | str, /, *args: Any, run_id: str | None = None, **kwargs: Any
    ) -> Any:
        """:meth:`run` for use inside a running event loop (sync workflows run inline);
        a parked run is waited for in a thread, so the loop goes on meanwhile."""
        w, run = self._prepare_resolved(wf, args, kwargs, run_id)
        return await self._drive_to_end_async(w, run)

    def resume(self, run_id: str) -> Any:
        """Drive an existing run with the input it was started with (waiting in-process
        while it is parked, like :meth:`run`)."""
        self._known_run_id(run_id)
        return self._resume(run_id, wait=True)

    def _resume(self, run_id: str, wait: bool) -> Any:
        run = self.store.get_run(run_id)
        if run is None:
            raise RunNotFound(
                f"no run {run_id!r} in {redact_url(self.url)}; `durably runs list` shows runs"
            )
        return self._drive_to_end(self._for_run(run), run, wait)

    def get_run(self, run_id: str) -> RunRecord:
        """The run's record; raises ``RunNotFound``."""
        self._known_run_id(run_id)
        run = self.store.get_run(run_id)
        if run is None:
            raise RunNotFound(
                f"no run {run_id!r} in {redact_url(self.url)}; `durably runs list` shows runs"
            )
        return run

    def spend(self, run_id: str) -> Spend:
        """The run's spend (the spend ledger's sums across generations: every call that
        reported ``durably.usage``, repeated and failed attempts included) and its stored
        budget; raises ``RunNotFound``."""
        self.get_run(run_id)
        return self._store_call(lambda: self.store.get_spend(run_id))

    def history(self, run_id: str) -> list[StepRecord]:
        """The run's current history in program order."""
        run = self.get_run(run_id)
        return sorted(
            self.store.load_history(run_id, run.generation), key=lambda r: position_key(r.position)
        )

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
        statuses = runlist.check_statuses(status)
        where = {
            "workflow": runlist.check_text(workflow, "workflow"),
            "version": runlist.check_text(version, "version"),
            "queue": runlist.check_text(queue, "queue"),
            "search": runlist.check_search(search),
        }
        cursor = runlist.decode_cursor(after)
        n = runlist.check_limit(limit)
        start = runlist.check_since(since)
        rows = self._store_call(
            lambda: self.store.list_runs(statuses, limit=n + 1, since=start, after=cursor, **where)
        )
        return runlist.page_of(rows, n)

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
        where = {
            "workflow": runlist.check_text(workflow, "workflow"),
            "version": runlist.check_text(version, "version"),
            "queue": runlist.check_text(queue, "queue"),
            "search": runlist.check_search(search),
        }
        start = runlist.check_since(since)
        counts = self._store_call(lambda: self.store.count_runs(since=start, **where))
        return runlist.all_statuses(counts)

    def runs_by_version(self) -> list[tuple[str, str | None, str, int]]:
        """Runs not finished (not completed, failed, cancelled or continued), counted per
        ``(workflow, version, status, count)`` and ordered by them (no version first):
        what each version's workers must still drive before they can be stopped
        (``durably runs list --by-version``)."""
        return self._store_call(self.store.runs_by_version)

    def blobs(self, digests: Sequence[str]) -> dict[str, str]:
        """The stored blobs among ``digests`` (the sha256 content hashes a record's
        inputs or output refer to), as their JSON text by digest; a digest not stored
        (pruned, or never written) is left out."""
        if isinstance(digests, str) or not all(isinstance(d, str) for d in digests):
            raise ConfigError(
                f"digests must be a list of content hashes (str), got {digests!r:.80}"
            )
        wanted = list(digests)
        return self._store_call(lambda: self.store.get_blobs(wanted))

    def live_workers(self, queue: str | None = None) -> list[LiveWorker]:
        """The workers whose heartbeat row has not expired (serving ``queue`` when given),
        less those on this host whose pid is provably gone; at most ``WORKERS_MAX``. A
        worker on another host killed since its last beat is listed until its row
        expires."""
        name = runlist.check_text(queue, "queue")
        rows = self._store_call(self.store.live_workers)
        out: list[LiveWorker] = []
        for owner, queues in rows:
            if (name is None or name in queues) and not owner_dead(owner):
                host, pid = describe_owner(owner)
                out.append(LiveWorker(owner, host, pid, tuple(queues)))
        return out

    def events(self, run_id: str, after: int = 0, limit: int = 1000) -> EventPage:
        """One page of the run's event stream: events with cursor > ``after``, oldest
        first, at most ``limit``; pass the page's ``cursor`` as ``after`` to read on
        (no gap, no repeat). Raises ``RunNotFound``."""
        self._known_run_id(run_id)
        _check_cursor(after, limit)
        page = self._store_call(lambda: self.store.read_events(run_id, after, limit))
        if page is None:
            raise RunNotFound(
                f"no run {run_id!r} in {redact_url(self.url)}; `durably runs list` shows runs"
            )
        return page

    def follow(self, run_id: str, after: int = 0, poll_s: float = FOLLOW_POLL_S_DEFAULT) -> Follow:
        """Follow the run's stream live: one object for both ``for`` and ``async for``,
        yielding every event after ``after`` and ending once the run finishes. Woken by
        LISTEN/NOTIFY on PostgreSQL, a ``poll_s`` poll on SQLite. Raises ``RunNotFound``
        (at once, not on the first ``next``)."""
        self.events(run_id, after, 1)  # fail fast on an unknown run or a bad cursor
        if not poll_s > 0:
            raise ConfigError(f"poll_s must be a positive number of seconds, got {poll_s!r}")
        return Follow(
            read=lambda cursor: self.events(run_id, cursor),
            wait=lambda timeout_s: self.store.wait_for_events(run_id, timeout_s),
            after=after,
            poll_s=poll_s,
        )

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
        if not isinstance(run_id, str) or not run_id:
            raise ConfigError(f"engine.signal: run_id must be a non-empty str, got {run_id!r:.300}")
        self._known_run_id(run_id)
        if not isinstance(name, str) or not name:
            raise ConfigError(
                f"engine.signal: the signal name must be a non-empty str, got {name!r:.300}"
            )
        check_name(name, "engine.signal: the signal name")
        try:
            text = codec.dumps(data, f"the data of signal {name!r}", SIGNAL_DATA_BYTES_MAX)
        except SerializationError as exc:
            # exc's message ends with a full stop already.
            raise SerializationError(
                f"{str(exc).rstrip('.')}. Nothing was sent to run {run_id!r}"
            ) from None
        import uuid  # imported on first use: it pulls in platform (slow)

        # One name for this send across the retries below: a retry after an unknown
        # commit outcome finds the stored signal instead of sending it twice.
        send = uuid.uuid4().hex
        return self._store_call(lambda: self.store.send_signal(run_id, name, text, send))

    # -- approvals -----------------------------------------------------------------------

    def pending_approvals(self, run_id: str | None = None) -> list[PendingApproval]:
        """Approval requests waiting for a person (of one run, or of all runs still going),
        oldest first, at most ``APPROVALS_LIST_MAX``: each with ``run_id``,
        ``request_id``, ``action``, ``args``, ``digest``, ``requested_at`` and
        ``expires_at``. A request past its expiry stays listed until its run takes the
        expiry, but can no longer be decided."""
        if run_id is not None and not self._storable_run_id(run_id):
            return []  # no run can have that id, so none of its requests wait
        rows = self._store_call(lambda: self.store.pending_approvals(run_id))
        return pending_list(rows)  # a damaged row is left out (with a warning)

    def pending_approval_rows(self, run_id: str | None = None) -> list[ApprovalRow]:
        """The requests ``pending_approvals`` lists, as stored: each an
        ``durably.approvals.ApprovalRow`` (``args`` its canonical JSON text, times in
        seconds since the epoch), so a tool can show a hand-edited row as the text it
        holds instead of failing on it."""
        if run_id is not None and not self._storable_run_id(run_id):
            return []  # no run can have that id, so none of its requests wait
        return self._store_call(lambda: self.store.pending_approvals(run_id))

    def approval_row(self, run_id: str, request_id: str) -> ApprovalRow | None:
        """Request ``request_id`` of run ``run_id`` as stored, pending or decided (its
        ``outcome``, ``by``, ``note``, ``decided_at``), or None when there is none."""
        if not self._storable_run_id(run_id) or not self._storable_run_id(request_id):
            return None  # no run (or request) can have that id
        return self._store_call(lambda: self.store.get_approval(run_id, request_id))

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
        return self._decide(run_id, request_id, digest, APPROVED, by, note, "engine.approve")

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
        return self._decide(run_id, request_id, digest, REJECTED, by, reason, "engine.reject")

    def _decide(
        self,
        run_id: str,
        request_id: str,
        digest: str,
        outcome: str,
        by: str | None,
        note: str | None,
        where: str,
    ) -> Decision:
        for name, value in (("run_id", run_id), ("request_id", request_id)):
            if not isinstance(value, str) or not value:
                raise ConfigError(f"{where}: {name} must be a non-empty str, got {value!r:.200}")
        self._known_run_id(run_id)
        if not isinstance(digest, str):
            raise ConfigError(f"{where}: digest must be the request's digest (a str)")
        by = check_approval_text(by, f"{where}: by")
        note = check_approval_text(note, f"{where}: {'note' if outcome == APPROVED else 'reason'}")
        row = self._store_call(
            lambda: self.store.decide_approval(
                run_id, request_id, digest=digest, outcome=outcome, by=by, note=note
            )
        )
        return row.decision()

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
        if not isinstance(queue, str) or not queue:
            raise ConfigError(f"queue must be a non-empty str, got {queue!r}")
        check_text(queue, "queue")
        w, run = self._prepare_resolved(wf, args, kwargs, run_id, queue)
        return Handle(self, run.run_id, w)

    def queue(
        self, name: str, *, concurrency: int | None = None, worker_concurrency: int | None = None
    ) -> None:
        """Limit how many runs of queue ``name`` run at once: ``concurrency`` across the
        whole fleet, ``worker_concurrency`` within one worker process."""
        for v in (concurrency, worker_concurrency):
            if v is not None and v < 1:
                raise ConfigError(f"queue {name!r}: concurrency limits must be >= 1")
        self._queue_limits[name] = QueueLimits(concurrency, worker_concurrency)

    def claim_next(
        self, queues: list[str], skip_queues: frozenset[str] = frozenset()
    ) -> RunRecord | None:
        """Claim the next runnable run of ``queues`` this engine can execute (for workers)."""
        served = self.served()
        limits = {
            q: lim.concurrency
            for q, lim in self._queue_limits.items()
            if lim.concurrency is not None
        }
        open_queues = [q for q in queues if q not in skip_queues]
        if not open_queues:
            return None
        return self.store.claim_next(
            self._owner_now(),
            self.lease_s,
            self.max_starts,
            owner_dead,
            served,
            open_queues,
            limits,
        )

    def execute_claimed(self, run: RunRecord) -> Any:
        """Drive a run this process has just claimed (for workers); returns its result or
        raises like :meth:`run`."""
        w = self._for_run(run)
        if w.is_async:
            import asyncio

            return asyncio.run(self._drive_async(w, run, claimed=True))
        return self._drive_sync(w, run, claimed=True)

    def abandon_active(self) -> list[str]:
        """Give back every run this process is driving (for a worker past its drain
        deadline): their cores stop at the next step and their leases are released so
        another worker takes them at once. Returns the run ids."""
        with self._active_lock:
            active = list(self._active.values())
        for att in active:
            att.core.lose_lease()
            att.heartbeat.stop()
            self._give_back(att.run.run_id, att.core.token)
        return [att.run.run_id for att in active]

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
        run = self.get_run(run_id)
        if run.status == FAILED_RUN:
            history = self.history(run_id)
            reopen.check_not_compensated(run, history)
            failed = reopen.failed_frontier(history)
            reopen.check_reopenable(run, history, failed)
            return self.store.requeue(run_id, (FAILED_RUN,), drop_positions=failed)
        if run.status == IN_DOUBT:
            # Only the step the person decided on: other intents still meet their own
            # key, reconcile or doubt check when the run reaches them.
            doubt = reopen.doubt_position(run.park_reason)
            return self.store.requeue(
                run_id,
                (IN_DOUBT,),
                drop_intents=doubt is None,
                drop_positions=() if doubt is None else (doubt,),
            )
        # Only the statuses this branch decided for: a run that failed or went in doubt
        # since it was read above needs that branch's drops, so it is refused here.
        check_requeueable(run, (FAILED_RUN, IN_DOUBT, QUARANTINED, BLOCKED))
        return self.store.requeue(run_id, (QUARANTINED, BLOCKED))

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
        self._known_run_id(run_id)
        if reason is not None and not isinstance(reason, str):
            raise ConfigError(f"reason must be a str or None, got {reason!r:.100}")
        text = None if reason is None else storable_text(reason, CANCEL_REASON_CHARS_MAX)
        run = self._store_call(lambda: self.store.request_cancel(run_id, text))
        with self._active_lock:
            att = self._active.get(run_id)
        if att is not None and run.cancel_requested_at is not None:
            # Driven by this process: no need to wait for its next append to see it.
            att.core.request_halt(cancelled_error(run_id, run.cancel_reason))
        return run

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
        run = self.get_run(run_id)
        history = self.history(run_id)
        records = reopen.fork_records(history, reopen.fork_at(at, history))
        new_id = self._new_run_id(new_run_id)
        forked = self.store.fork_run(
            NewRun(
                new_id,
                run.workflow,
                run.version,
                run.prompt_version,
                run.queue,
                run.input,
                run.input_digest,
                run.codec_version,
            ),
            records,
        )
        try:
            w = self._for_run(forked)  # the registration that will drive it, if here
        except WorkflowNotRegistered:
            w = _unregistered(forked)
        return Handle(self, forked.run_id, w)

    def skip(self, run_id: str, output: Any, position: str | None = None) -> RunRecord:
        """Record ``output`` as the result of the ``in_doubt`` step without running it
        again; returns the queued run. ``position`` defaults to the step the run is in
        doubt about (the one ``runs show`` names); other intents kept by a retry are not
        in doubt yet (each still meets its own key, reconcile or doubt check)."""
        run = self.get_run(run_id)
        if run.status != IN_DOUBT:
            raise RunFinished(
                f"run {run_id!r} is {run.status}, not in_doubt: there is no step to skip"
            )
        doubts = [r.position for r in self.history(run_id) if r.status == "intent"]
        named = reopen.doubt_position(run.park_reason)
        if position is None and named in doubts:
            position = named
        if position is None:
            if len(doubts) != 1:
                raise ConfigError(
                    f"run {run_id!r} has {len(doubts)} steps in doubt ({', '.join(doubts)});"
                    " name one with position="
                )
            position = doubts[0]
        text = codec.dumps(output, f"the output given for step {position}", STEP_OUTPUT_BYTES_MAX)
        return self.store.requeue(run_id, (IN_DOUBT,), resolve=(position, text))

    def recover(self) -> dict[str, Any]:
        """Resume every run whose owner was a process of this host that is gone (call it
        at startup, like DBOS's recovery): runs of the workflow versions this engine
        registers (a run of another version is left to a process that has it) left
        ``running`` by a crash here, and, once their leases expire (this waits), by an
        earlier boot of this machine. Returns each resumed run id mapped to its result, or
        to the ``DurablyError`` that stopped it (``WorkflowFailed``, ``RunInDoubt``, ...;
        ``RunParked`` for one that parked: recovery does not wait out its timer). A run
        another process takes first is left to it.
        """
        results: dict[str, Any] = {}
        for run in orphans_of_this_host(self.store, self.served()):
            _log.info("durably: recovering run %s (its owner %s is gone)", run.run_id, run.owner)
            try:
                # A run that parks stays parked (RunParked in the results): recovery does
                # not wait out timers; a worker or a later call resumes it when due.
                results[run.run_id] = self._resume(run.run_id, wait=False)
            except RunLeased:
                continue  # a worker took it meanwhile: it is being driven
            except DurablyError as exc:
                results[run.run_id] = exc
        return results

    def close(self) -> None:
        """Stop lease keeping and close the store's connections."""
        self._keeper.close()
        self.store.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the drive loop ------------------------------------------------------------------

    def _drive_to_end(self, w: Workflow, run: RunRecord, wait: bool = True) -> Any:
        """Drive ``run`` until it ends; while it parks, wait in this process until it is
        due (:meth:`_await_wake`) and replay it (unless ``wait`` is off: RunParked)."""
        # True once this call waited for the run, or when it found the run queued: a
        # worker serving the workflow may claim it first (between engine.run creating the
        # run and claiming it), and then this call follows it to its end.
        followed = run.status == QUEUED
        while True:
            if wait and run.status == PARKED:
                run = self._await_wake(run)
                followed = True
            try:
                if w.is_async:
                    import asyncio

                    return asyncio.run(self._drive_async(w, run))
                return self._drive_sync(w, run)
            except RunParked:
                if not wait:
                    raise
                run = self.get_run(run.run_id)
            except RunLeased:
                if not followed:
                    raise
                # Another process took the run when it was due: follow it to its end.
                run = self._follow(run.run_id)
            followed = True

    async def _drive_to_end_async(self, w: Workflow, run: RunRecord) -> Any:
        """:meth:`_drive_to_end` on the running event loop: the waits run in a thread."""
        import asyncio

        followed = run.status == QUEUED  # see _drive_to_end
        while True:
            if run.status == PARKED:
                run = await asyncio.to_thread(self._await_wake, run)
                followed = True
            try:
                if w.is_async:
                    return await self._drive_async(w, run)
                return self._drive_sync(w, run)
            except RunParked:
                run = await asyncio.to_thread(self.get_run, run.run_id)
            except RunLeased:
                if not followed:
                    raise
                run = await asyncio.to_thread(self._follow, run.run_id)
            followed = True

    def _await_wake(self, run: RunRecord) -> RunRecord:
        """Wait while ``run`` is parked and not due, for at most ``park_wait_s``; return
        its row once due or no longer parked (claimed by a worker, cancelled, finished).
        Past the bound, raise ``RunParked`` (the run stays parked).

        Nothing is held meanwhile: no lease, no row lock. On the real clock the wait is
        sliced (at most PARK_WAIT_SLICE_S) into waits for the run's events, so a
        PostgreSQL NOTIFY (a signal, a cancel) ends a slice at once and SQLite looks again
        within a second; on an injected clock (tests) the clock sleeps to the wake time.
        """
        deadline = None if self.park_wait_s is None else self.clock.time() + self.park_wait_s
        real = isinstance(self.clock, SystemClock)
        run_id = run.run_id
        told = False
        while run.status == PARKED:
            now = self.clock.time()
            wake = run.wake_at
            if wake is not None and math.isnan(wake):
                # A hand-edited row (PostgreSQL keeps NaN, which no claim finds due): no
                # wake time, so the waits below are slices, not a loop of zero waits.
                wake = None
            if wake is not None and wake <= now:
                break
            if deadline is not None and now >= deadline:
                raise RunParked(run.run_id, run.park_reason or "parked", wake)
            if not told:
                _log.info(
                    "durably: run %s is parked (%s); waiting in this process",
                    run.run_id,
                    run.park_reason or "no reason recorded",
                )
                told = True
            until = min(
                math.inf if wake is None else wake,
                math.inf if deadline is None else deadline,
            )
            if not real and math.isfinite(until):
                self.clock.sleep(until - now)
            else:
                slice_s = min(PARK_WAIT_SLICE_S, max(0.0, until - now))
                self._store_call(functools.partial(self.store.wait_for_events, run_id, slice_s))
            run = self._store_call(functools.partial(self.get_run, run_id))
        return run

    def _follow(self, run_id: str) -> RunRecord:
        """Wait (polling, like ``Handle.result``) while another live process drives the
        run; return its row once it is not running under a live lease (finished, parked
        again, or orphaned and claimable)."""
        while True:
            run = self.get_run(run_id)
            live = (
                run.status == RUNNING
                and run.owner is not None
                and run.lease_expires_at is not None
                and run.lease_expires_at > self.clock.time()
                and not owner_dead(run.owner)
            )
            if not live:
                return run
            time.sleep(FOLLOW_POLL_S)

    def _drive_sync(self, w: Workflow, run: RunRecord, claimed: bool = False) -> Any:
        att = self._begin(w, run, claimed)
        if not isinstance(att, _Attempt):
            return att.value
        try:
            if w.budget is not None:
                drive_sync(att.executor, budgets.set_budget(att.core, w.budget))
            ctx = Context(att.core, att.executor)
            with workflow_body(ctx):
                result = w.fn(ctx, *att.args, **att.kwargs)
        except BaseException as exc:
            self._conclude_error(att, exc)
            raise
        return self._conclude(att, result)

    async def _drive_async(self, w: Workflow, run: RunRecord, claimed: bool = False) -> Any:
        import asyncio

        # Claiming and concluding may wait out a failing store (retry backoff, up to
        # store_retry_s; a dead owner's lease): in a worker thread, so the event loop and
        # the other runs on it go on meanwhile.
        att = await asyncio.to_thread(self._begin, w, run, claimed)
        if not isinstance(att, _Attempt):
            return att.value
        try:
            if w.budget is not None:
                await drive_async(att.executor, budgets.set_budget(att.core, w.budget))
            if w.is_async:
                actx = AsyncContext(att.core, att.executor)
                with workflow_body(actx):
                    result = await w.fn(actx, *att.args, **att.kwargs)
            else:
                ctx = Context(att.core, att.executor)
                with workflow_body(ctx):
                    result = w.fn(ctx, *att.args, **att.kwargs)
        except BaseException as exc:
            await asyncio.to_thread(self._conclude_error, att, exc)
            raise
        return await asyncio.to_thread(self._conclude, att, result)

    def _forget(self, att: _Attempt) -> None:
        att.heartbeat.stop()
        with self._active_lock:
            if self._active.get(att.run.run_id) is att:
                del self._active[att.run.run_id]

    def _prepare_resolved(
        self,
        wf: Workflow | str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        run_id: str | None,
        queue: str = "default",
    ) -> tuple[Workflow, RunRecord]:
        """Create the run (or find it) and the registration that drives it: a new run's
        chosen version, an existing run's recorded one."""
        w = self._resolve(wf)
        self._check_arguments(w, args, kwargs, run_id)
        run = self._prepare(w, args, kwargs, run_id, queue)
        if run.version != w.version:
            w = self._for_run(run)
        return w, run

    def _check_arguments(
        self, w: Workflow, args: tuple[Any, ...], kwargs: dict[str, Any], run_id: str | None
    ) -> None:
        """Refuse, before a run is created, arguments the workflow function cannot take:
        created, the run would fail at once with a TypeError, and its run id would stay
        bound to the wrong input (a corrected call is a ``RunConflict``). A run that
        exists already is left to the usual checks (its recorded input decides)."""
        try:
            sig = inspect.signature(w.fn)
        except (TypeError, ValueError):
            return  # a callable without a readable signature: nothing to check
        try:
            sig.bind(None, *args, **kwargs)  # None stands for the context
        except TypeError as exc:
            if run_id is not None and self.store.get_run(run_id) is not None:
                return
            raise ConfigError(
                f"workflow {w.name!r} cannot take these arguments: {exc}; no run was"
                f" created. Pass what {w.fn.__name__}({', '.join(sig.parameters)}) takes after"
                " its context:"
                f" engine.run(wf, *args, run_id=..., **kwargs)"
            ) from None

    def _prepare(
        self,
        w: Workflow,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        run_id: str | None,
        queue: str = "default",
    ) -> RunRecord:
        run_id = self._new_run_id(run_id)
        text = codec.dumps(
            {"args": list(args), "kwargs": kwargs}, "workflow input", RUN_INPUT_BYTES_MAX
        )
        digest = hashlib.sha256(text.encode()).hexdigest()
        run, created = self.store.create_run(
            NewRun(
                run_id,
                w.name,
                w.version,
                w.prompt_version,
                queue,
                text,
                digest,
                codec.CODEC_VERSION,
            )
        )
        if not created:
            if run.workflow != w.name:
                raise RunConflict(
                    f"run_id {run_id!r} belongs to workflow {run.workflow!r}, not {w.name!r};"
                    " choose another run_id"
                )
            if run.input_digest != digest:
                raise RunConflict(
                    # No digests: a short input is found again from its sha256.
                    f"run_id {run_id!r} was started with other input; use a new run_id for"
                    " new input, or"
                    " engine.resume(run_id) to continue it with its recorded input"
                )
        return run

    def _new_run_id(self, run_id: str | None) -> str:
        """``run_id`` checked (a fresh UUID when None): a non-empty str of at most
        RUN_ID_CHARS_MAX characters without control characters, so that every key of the
        run fits KEY_CHARS_MAX and is one a receiving side accepts."""
        if run_id is None:
            import uuid  # imported on first use: it pulls in platform (slow)

            return uuid.uuid4().hex
        if not isinstance(run_id, str) or not run_id:
            raise ConfigError(f"run_id must be a non-empty str, got {run_id!r:.300}")
        if len(run_id) <= RUN_ID_CHARS_MAX and run_id.isprintable():
            return run_id
        # NUL or a lone surrogate first: no database can even look such an id up.
        if unstorable(run_id) is None and self.store.get_run(run_id) is not None:
            return run_id  # created before these limits: it may still be driven
        if not run_id.isprintable():
            raise ConfigError(
                f"run_id {run_id!r:.300} contains control or other unprintable characters;"
                " every idempotency key of the run starts with it and a receiving side"
                " (an Idempotency-Key header) refuses them: use letters, digits and"
                " punctuation such as '-', '_', ':' or '/'"
            )
        raise ConfigError(
            f"run_id must be a non-empty str of at most {RUN_ID_CHARS_MAX} characters (its"
            f" idempotency keys must fit the receiving side's {KEY_CHARS_MAX}), got"
            f" {run_id!r:.300}"
        )

    def _owner_now(self) -> Owner:
        """This process as an owner, shown alive to the database (PostgreSQL's owner lock)
        before it claims anything."""
        pid = os.getpid()
        if self._owner is None or self._owner[0] != pid:  # a forked child is a new owner
            self._owner = (pid, Owner.current())
        # A lock session that ended since the last look (the keeper looks only every
        # heartbeat) stops the runs driven now, before the lock is taken again below:
        # else the new session would hide the gap and the next claim would be stopped.
        self._keeper.check_owner_lock(ping=False)
        self.store.hold_owner(self._owner[1])
        return self._owner[1]

    def _claim(self, run_id: str) -> RunRecord:
        """Claim the run; when a dead-looking owner on another host holds its lease, wait
        for the lease once (logging why and until when) unless ``wait_for_lease`` is off."""
        me, where = str(self._owner_now()), (self.url, run_id)
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
                return self.store.claim(
                    run_id, self._owner_now(), self.lease_s, self.max_starts, gone
                )
            except StoreError:
                unknown = True
                raise

        waited: LeaseWait | None = None
        while True:
            try:
                run = self._store_call(claim)
                _UNRELEASED.discard(where)
                return run
            except RunLeased:
                held = self.store.get_run(run_id)
                if held is None or not self.wait_for_lease:
                    raise
                waited = lease_wait(self.store, held, waited)
                if waited is None:
                    raise
                if not waited.until - self.clock.time() <= max(LEASE_WAIT_MAX_S, self.lease_s):
                    # No lease durably writes ends that far ahead (or never: inf, NaN):
                    # a hand-edited row, not an owner to wait for.
                    raise
                _log.warning("%s", waited.message())
                self.clock.sleep(max(0.0, waited.until - self.clock.time()) + LEASE_WAIT_SLACK_S)

    def _begin(self, w: Workflow, run: RunRecord, claimed: bool = False) -> _Attempt | _Final:
        if not claimed:
            final = _final_outcome(w, run)
            if final is not None:
                return final
            try:
                run = self._claim(run.run_id)
            except RunFinished:
                # Another process finished it since we looked: return its outcome.
                final = _final_outcome(w, self.get_run(run.run_id))
                assert final is not None
                return final
        hb: _Heartbeat | None = None
        try:
            history = self._store_call(lambda: self.store.load_history(run.run_id, run.generation))
            # The setup carries the driver's own view of its lease, on the engine's clock:
            # every live step checks it first (no I/O), so a process stopped past its
            # lease runs no step.
            setup = RunSetup.for_run(
                run,
                history,
                self.clock,
                prompt_version=w.prompt_version,
                fetch_blobs=self.store.get_blobs,
                fault_hook=self.fault_hook,
            )
            core = RunCore(setup)
            if run.cancel_requested_at is not None:
                # Cancelled before this claim (or while parked): the replay reaches where
                # it was, and the first position that would go live raises Cancelled.
                core.request_halt(cancelled_error(run.run_id, run.cancel_reason))
            hb = self._keeper.add(core)
            ex = Executor(core, self.store, self.clock, self.store_retry_s, self.lease_s)
            att = _Attempt(w, run, core, ex, hb, [], {})
            att.args, att.kwargs = _decode_input(w, run)
        except BaseException as exc:
            # A start that fails holds a lease it will never use: stop renewing it and give
            # the run back (blocked when its input cannot be decoded: a retry would too).
            if hb is not None:
                hb.stop()
            self._release_unstarted(run, exc)
            raise
        with self._active_lock:
            self._active[run.run_id] = att
        return att

    def _release_unstarted(self, run: RunRecord, exc: BaseException) -> None:
        try:
            if isinstance(exc, SerializationError):
                reason = storable_text(str(exc), PARK_REASON_CHARS_MAX)
                self.store.release(
                    run.run_id,
                    run.fencing_token,
                    BLOCKED,
                    park_reason=reason,
                    error_type=type(exc).__name__,
                )
            else:
                self.store.release(run.run_id, run.fencing_token)
        except DurablyError:
            # The lease expires instead (this process's own retry may take it over at
            # once); the error that stopped the start matters more.
            _UNRELEASED.add((self.url, run.run_id))

    def _conclude(self, att: _Attempt, result: Any) -> Any:
        core, run_id = att.core, att.run.run_id
        try:
            core.guard()
            core.unconsumed_check()
            try:
                out = codec.dumps(
                    result, f"workflow {att.workflow.name!r} result", RUN_RESULT_BYTES_MAX
                )
            except SerializationError as exc:
                # Blocked, not failed: return storable data and resume; recorded steps replay.
                raise core.poison(
                    SerializationError(
                        f"{exc}. The run is blocked: change the workflow to return storable"
                        f" data, then `{command('retry', run_id)}` (recorded steps replay)"
                    )
                ) from None
            records, events = core.take_pending(), core.take_events()
            self._record(
                core,
                lambda: self.store.finish(
                    run_id, core.token, COMPLETED, records, outcome=out, events=events
                ),
            )
        except BaseException as exc:
            self._conclude_error(att, exc)
            raise
        self._forget(att)
        return codec.loads(out, att.workflow.return_hint)

    def _conclude_error(self, att: _Attempt, exc: BaseException) -> None:
        """Record why the attempt ended, then let the caller re-raise (or translate).

        A latched stop outranks whatever the workflow made of it (a bare ``except:`` that
        raised something else, or returned). A store failure, here or while recording the
        outcome, never makes the run terminal: the lease is given back (so a retry from
        this process is not refused) and the ``StoreError`` reaches the caller.
        """
        core, run_id, token = att.core, att.run.run_id, att.core.token
        self._forget(att)
        signal = core.stopped if core.stopped is not None else exc
        try:
            if isinstance(signal, (LeaseLost, StoreFailed)):
                raise signal
            if core.poisoned is not None:
                reason = storable_text(str(core.poisoned), PARK_REASON_CHARS_MAX)
                events = core.take_events()
                kind = type(core.poisoned).__name__  # runs why: what to fix
                self._record(
                    core,
                    lambda: self.store.release(
                        run_id, token, BLOCKED, reason, events=events, error_type=kind
                    ),
                )
                if core.poisoned is not exc:
                    raise core.poisoned from exc
                return
            if (
                isinstance(core.halted, Cancelled)
                and isinstance(signal, Exception)
                and not isinstance(signal, CompensationFailed)
            ):
                # Cancelled: whatever the workflow made of it (raised it, caught it and
                # returned, raised something else), the run ends cancelled; the halt
                # marker rides with the pending records. Except when a saga's
                # compensation failed for good: something the cancel should have undone
                # may be left in place, so the run ends failed, for a person to look at.
                self._finish_cancelled(core, run_id, core.halted)
            if isinstance(signal, Parked) and signal.reason in PARK_KINDS:
                self._park(core, run_id, token, signal)
            if isinstance(signal, Parked) and signal.reason == IN_DOUBT:
                why = storable_text(core.in_doubt or "", PARK_REASON_CHARS_MAX)
                events = core.take_events()
                self._record(
                    core, lambda: self.store.release(run_id, token, IN_DOUBT, why, events=events)
                )
                raise RunInDoubt(f"run {run_id!r} is in doubt: {core.in_doubt}") from None
            if isinstance(signal, Exception):
                records, events = core.take_pending(), core.take_events()
                self._record(
                    core,
                    lambda: self.store.finish(
                        run_id,
                        token,
                        FAILED_RUN,
                        records,
                        error_type=_failure_type(signal),
                        error_message=_failure_message(signal),
                        events=events,
                    ),
                )
                raise WorkflowFailed(
                    run_id, _failure_type(signal), _failure_message(signal)
                ) from signal
            # KeyboardInterrupt, SystemExit, an injected crash: give the run back untouched
            # so a restart (or another worker) resumes at once.
            self._give_back(run_id, token)
        except LeaseLost as lost:
            # Our lease may only have run out locally: releasing it (a stale token changes
            # nothing) lets the next owner start at once.
            self._give_back(run_id, token)
            raise StaleLease(run_id, token, lost.reason) from None
        except StoreFailed as failed:
            self._give_back(run_id, token)
            raise failed.error from (exc if exc is not failed else None)

    def _finish_cancelled(self, core: RunCore, run_id: str, halted: Cancelled) -> NoReturn:
        """Record the run ``cancelled`` (its pending records with the halt marker, the
        reason as its message) and raise ``Cancelled`` for the caller of ``engine.run``."""
        reason = halted.reason
        message = None if reason is None else storable_text(reason, ERROR_MESSAGE_CHARS_MAX)
        records, events = core.take_pending(), core.take_events()
        self._record(
            core,
            lambda: self.store.finish(
                run_id,
                core.token,
                CANCELLED,
                records,
                error_type=CANCEL_ERROR_TYPE,
                error_message=message,
                events=events,
            ),
        )
        raise cancelled_error(run_id, reason) from None

    def _park(self, core: RunCore, run_id: str, token: int, parked: Parked) -> NoReturn:
        """Park the run (its pending records, such as the timer's ``waiting`` record, and
        events in the same fenced transaction) and raise ``RunParked`` with the effective
        wake time (at once when a cancel or the awaited signal came first)."""
        reason = storable_text(park_reason(parked), PARK_REASON_CHARS_MAX)
        records, events = core.take_pending(), core.take_events()
        approvals = list(parked.approvals)
        woke: list[float | None] = []

        def park() -> None:
            woke.append(
                self.store.park(
                    run_id,
                    token,
                    records,
                    events,
                    kind=parked.reason,
                    park_reason=reason,
                    wake_at=parked.wake_at,
                    wait_signals=parked.wait_signals,
                    approvals=approvals,
                )
            )

        self._record(core, park)
        raise RunParked(run_id, reason, woke[-1])

    def _known_run_id(self, run_id: object) -> None:
        """Refuse a run id no journal can hold before it reaches the store: not a str is
        a ``ConfigError``; a NUL or a lone surrogate (a mistyped or mis-decoded id) is
        ``RunNotFound``, since no run can have it (PostgreSQL would refuse the query,
        and a surrogate cannot be sent to either database)."""
        if not self._storable_run_id(run_id):
            raise RunNotFound(
                f"no run {str(run_id)[:80]!a} in {redact_url(self.url)}: a run id never"
                f" holds {unstorable(str(run_id))}; `durably runs list` shows runs"
            )

    @staticmethod
    def _storable_run_id(run_id: object) -> bool:
        """Whether ``run_id`` is text a journal can hold (``ConfigError`` when it is not
        a str at all)."""
        if not isinstance(run_id, str):
            raise ConfigError(f"run_id must be a str, got {run_id!r:.80}")
        return unstorable(run_id) is None

    def _store_call(self, op: Callable[[], T]) -> T:
        """``op()``, retrying a transient store error for up to ``store_retry_s``."""
        return retry.call(op, self.clock, self.store_retry_s)

    def _record(self, core: RunCore, op: Callable[[], None]) -> None:
        """Record an outcome through ``op`` (retried); a refusal or a store failure is
        latched in the core and raised as its stop signal."""
        with recording(core):
            self._store_call(op)

    def _give_back(self, run_id: str, token: int) -> None:
        """Release the lease if the store lets us, in one attempt; else it expires."""
        try:
            self.store.release(run_id, token)
            _UNRELEASED.discard((self.url, run_id))
        except DurablyError as exc:
            _UNRELEASED.add((self.url, run_id))
            _log.warning("durably: cannot release run %s (%s); its lease will expire", run_id, exc)


@dataclass(frozen=True)
class QueueLimits:
    """Concurrency limits of one queue."""

    concurrency: int | None = None
    worker_concurrency: int | None = None


class Handle:
    """A started run: its id, its status, and a way to wait for its result."""

    def __init__(self, engine: Engine, run_id: str, workflow: Workflow) -> None:
        self.engine = engine
        self.run_id = run_id
        self.workflow = workflow

    def __repr__(self) -> str:
        return f"<durably.Handle {self.run_id!r} of {self.workflow.name!r}>"

    def status(self) -> str:
        """The run's current status."""
        return self.engine.get_run(self.run_id).status

    def result(self, timeout_s: float | None = None, poll_s: float = 0.05) -> Any:
        """Wait for the run to finish and return its result (or raise its failure).

        Raises ``TimeoutError`` after ``timeout_s``, and at once for a run that needs a
        person (``RunInDoubt``, ``RunQuarantined``, ``RunBlocked``).
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            run = self.engine.get_run(self.run_id)
            final = _final_outcome(self.workflow, run)
            if final is not None:
                return final.value
            if run.status == BLOCKED:
                raise RunBlocked(f"run {self.run_id!r} is blocked: {run.park_reason}")
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(
                    f"run {self.run_id!r} did not finish within {timeout_s} s (status"
                    f" {run.status}); is a worker running (durably worker module:engine)?"
                )
            time.sleep(poll_s)


@dataclass
class _Final:
    value: Any


def _final_outcome(w: Workflow, run: RunRecord) -> _Final | None:
    """The recorded outcome of a run that will not execute again, else None."""
    if run.status == COMPLETED:
        return _Final(codec.loads(run.outcome or "null", w.return_hint))
    if run.status == FAILED_RUN:
        raise WorkflowFailed(run.run_id, run.error_type or "Exception", run.error_message or "")
    if run.status == CANCELLED:
        raise cancelled_error(run.run_id, run.cancel_reason or run.error_message)
    if run.status == QUARANTINED:
        raise RunQuarantined(
            f"run {run.run_id!r} is quarantined after {run.starts} starts without progress;"
            " fix the cause, then `durably retry` it"
        )
    if run.status == IN_DOUBT:
        raise RunInDoubt(f"run {run.run_id!r} is in doubt: {run.park_reason}")
    return None


_CURSOR_MAX = 2**63 - 1
"""Largest event cursor: the journals keep cursors as 64-bit integers (BIGINT)."""


def _check_cursor(after: object, limit: object) -> None:
    """Refuse a cursor or limit that is not a non-negative int, saying what to pass."""
    if not isinstance(after, int) or isinstance(after, bool) or not 0 <= after <= _CURSOR_MAX:
        shown = repr(after) if len(repr(after)) <= 40 else f"{repr(after)[:40]}..."
        raise ConfigError(
            f"after must be an event cursor (an int from 0 to 2**63 - 1, e.g. a page's"
            f" .cursor), got {shown}"
        )
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= EVENTS_PAGE_MAX:
        raise ConfigError(f"limit must be an int from 1 to {EVENTS_PAGE_MAX}, got {limit!r}")


def _unregistered(run: RunRecord) -> Workflow:
    """A stand-in for a workflow this engine does not know (a fork made by ``durably
    fork``): its handle can wait for the run, and decodes the result without types."""

    def not_here(*_: Any, **__: Any) -> Any:
        raise WorkflowNotRegistered(f"workflow {run.workflow!r} is not registered here")

    return Workflow(run.workflow, run.version, run.prompt_version, not_here, False)


def park_reason(parked: Parked) -> str:
    """The ``park_reason`` recorded for a parked run: ``timer until 2026-11-30T10:00:00Z``
    (what ``durably runs list``/``show``/``why`` print)."""
    if parked.detail is not None:
        return parked.detail
    until = "" if parked.wake_at is None else f" until {utc_text(parked.wake_at)}"
    return f"{parked.reason}{until}"


def _failure_type(exc: BaseException) -> str:
    from .errors import StepFailed

    return exc.type_name if isinstance(exc, StepFailed) else type_name(exc)


def _failure_message(exc: BaseException) -> str:
    from .errors import StepFailed

    text = exc.message if isinstance(exc, StepFailed) else describe_error(exc)
    return storable_text(text, ERROR_MESSAGE_CHARS_MAX)


def _decode_input(w: Workflow, run: RunRecord) -> tuple[list[Any], dict[str, Any]]:
    """The run's recorded arguments, typed; any failure is a SerializationError.

    The input is checked against the sha256 recorded with it (``input_digest``) on the
    way out, as blobs are: an input changed after the run was created (a hand edit, a
    damaged row) would run the workflow on arguments nobody started it with."""
    if hashlib.sha256(run.input.encode("utf-8", "surrogatepass")).hexdigest() != run.input_digest:
        raise SerializationError(
            f"run {run.run_id!r}: its recorded input does not match the sha256 it was"
            " created with: the runs row was edited or"
            " damaged after the run was created, so the input is not used. The run is"
            " blocked and nothing recorded is changed: restore the row's input from a"
            f" backup, then `{command('retry', run.run_id)}`"
        )
    try:
        data = codec.loads(run.input)
        args, kwargs = data["args"], data["kwargs"]
        if not isinstance(args, list) or not isinstance(kwargs, dict):
            raise TypeError("args must be a list and kwargs an object")
        if not all(isinstance(k, str) for k in kwargs):
            raise TypeError("keyword argument names must be strings")
        return _typed_input(w, args, kwargs)
    except (SerializationError, KeyError, TypeError, ValueError, RecursionError) as exc:
        raise SerializationError(
            f"run {run.run_id!r}: its recorded input cannot be decoded for {w.name!r}"
            f" ({exc if isinstance(exc, SerializationError) else codec.error_text(exc)})."
            " The run is blocked: make the workflow's parameters match it (or repair the"
            f" row), then `{command('retry', run.run_id)}`"
        ) from exc


def _typed_input(
    w: Workflow, args: list[Any], kwargs: dict[str, Any]
) -> tuple[list[Any], dict[str, Any]]:
    """Rebuild the workflow's arguments from their annotations, so the first run and a
    resume see identical values."""
    if not w.param_hints:
        return args, kwargs
    names = list(inspect.signature(w.fn).parameters)[1:]
    typed = [
        codec.coerce(a, w.param_hints.get(names[i]) if i < len(names) else None)
        for i, a in enumerate(args)
    ]
    return typed, {k: codec.coerce(v, w.param_hints.get(k)) for k, v in kwargs.items()}


def version_key(version: str | None) -> tuple[tuple[int, int | str], ...]:
    """Natural sort key of a version: "10" after "9", "1.10" after "1.9"; None (no
    version) sorts first."""
    if version is None:
        return ()
    return tuple(
        # isdecimal, not isdigit: "²" is a digit that int() refuses (and \d does not match)
        (0, int(part)) if part.isdecimal() else (1, part)
        for part in re.split(r"(\d+)", version)
        if part
    )


def newest(versions: dict[str | None, Workflow]) -> Workflow:
    """The registration a new run takes: the highest version by natural sort (versions
    that sort alike, "01" and "1", by their text: never by the order they registered)."""
    return versions[max(versions, key=lambda v: (version_key(v), v or ""))]


def _check_version(version: object, what: str) -> None:
    """A workflow's ``version``/``prompt_version``: None, or a non-empty storable str (""
    would sort, route and print like no version at all, yet be another one)."""
    if version is None:
        return
    if not isinstance(version, str) or not version:
        raise ConfigError(
            f"@engine.workflow({what}=...) takes a non-empty str such as '2' (or None for"
            f" none), got {version!r:.100}"
        )
    check_name(version, f"the workflow {what}")


def _version_text(version: str | None) -> str:
    return "(no version)" if version is None else repr(version)


class _LeaseKeeper:
    """One background thread per engine (per process) renewing the leases of every run the
    engine is driving; a thread per run would cost more than a short run itself.

    When a renewal is refused (another claim raised the token), the run's core is told,
    and its next step raises instead of running any further effect. Each successful
    renewal moves the core's local lease deadline (on the engine's clock, taken before
    the call, so the local deadline is never later than the stored one).
    """

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

    def add(self, core: RunCore) -> _Heartbeat:
        """Keep ``core``'s lease until the returned handle is stopped."""
        with self._lock:
            self._cores[id(core)] = core
            if self._pid != os.getpid():  # first use, or a forked child without threads
                self._pid = os.getpid()
                t = threading.Thread(target=self._loop, daemon=True, name="durably-lease")
                t.start()
        return _Heartbeat(self, core)

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
        step). Runs claimed later take the lock again on a new connection."""
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
        return lost

    def remove(self, core: RunCore) -> None:
        """Stop renewing ``core``'s lease (idempotent)."""
        with self._lock:
            self._cores.pop(id(core), None)

    def close(self) -> None:
        """Stop the thread."""
        self._stop.set()

    def _loop(self) -> None:
        while not self._stop.wait(self._every_s):
            if self.check_owner_lock():
                continue
            with self._lock:
                cores = list(self._cores.values())
            for core in cores:
                asked_at = self._clock.time()
                try:
                    renewed = self._store.renew(core.run_id, core.token, self._lease_s)
                except DurablyError:
                    continue  # a busy database: try again at the next beat
                if renewed:
                    core.lease_renewed(asked_at + self._lease_s)
                else:
                    core.lose_lease()
                    self.remove(core)


@dataclass
class _Heartbeat:
    """The lease keeping of one attempt."""

    keeper: _LeaseKeeper
    core: RunCore

    def stop(self) -> None:
        """Stop renewing this attempt's lease (idempotent)."""
        self.keeper.remove(self.core)
