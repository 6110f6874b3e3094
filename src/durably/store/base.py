"""The Store protocol: everything the engine asks of a journal database.

The protocol covers every capability the engine stores (runs, histories, leases, parking,
signals, approvals, spend, events, blobs, workers), so it is wide, not small: about forty
methods, each one transaction. Every backend passes the same contract suite
(``tests/contract``). All writes that change a run are *fenced*: they carry the fencing
token of the claim that produced them and are refused (``LeaseLost``) when a later claim
has raised the token, so two processes can never both drive one run.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from ..budget import Budget, Spend, SpendEntry
from ..events import EventPage, NewEvent
from ..history import RunRecord, StepRecord, new_incarnation
from ..limits import APPROVALS_LIST_MAX as APPROVALS_LIST_MAX
from .owner import Owner
from .retained import PRUNABLE, Freed, Redaction, Tombstone

if TYPE_CHECKING:
    from ..approvals import ApprovalRequest, ApprovalRow

__all__ = ["NewRun", "Owner", "Store"]


Served = Mapping[str, Collection[str | None]]
"""What a worker serves: workflow name -> the versions it registers (None: the
registration without a version)."""


def served_pairs(served: Served) -> list[tuple[str, str | None]]:
    """``served`` as sorted (workflow, version) pairs, one per registration."""
    return sorted(
        ((name, v) for name, versions in served.items() for v in versions),
        key=lambda p: (p[0], p[1] is not None, p[1] or ""),
    )


def serves(served: Served, workflow: str, version: str | None) -> bool:
    """Whether a worker serving ``served`` may drive a run of ``workflow`` at ``version``:
    the claim queries' rule (a run without a version goes to any registration of its
    name, a versioned one only to a registration of that version)."""
    versions = served.get(workflow)
    return versions is not None and (version in versions if version is not None else bool(versions))


def served_json(served: Served) -> dict[str, list[str | None]]:
    """``served`` as a JSON-ready object: name -> sorted versions (None first)."""
    out: dict[str, list[str | None]] = {}
    for name, version in served_pairs(served):
        out.setdefault(name, []).append(version)
    return out


def status_list(status: str | Sequence[str] | None) -> list[str] | None:
    """``list_runs``'s ``status`` as a list of statuses (None: any status)."""
    if status is None:
        return None
    return [status] if isinstance(status, str) else list(status)


@dataclass(frozen=True, slots=True)
class NewRun:
    """What is known about a run when it is first created.

    ``incarnation`` is drawn here, once per row to be created: it tells this run's keys
    apart from those of any other run that ever had (or will have) the same run id.
    """

    run_id: str
    workflow: str
    version: str | None
    prompt_version: str | None
    queue: str
    input: str
    input_digest: str
    codec_version: int
    incarnation: str = field(default_factory=new_incarnation)


class RunsStore(Protocol):
    """The runs role: create, fork, read, list and count runs; requeue and cancel them."""

    def create_run(self, new: NewRun) -> tuple[RunRecord, bool]:
        """Insert the run unless it exists; return the row and whether it was created.

        An existing row keeps its own incarnation (``new.incarnation`` is then unused)."""
        ...

    def fork_run(
        self, new: NewRun, records: Sequence[StepRecord], source: str | None = None
    ) -> RunRecord:
        """Create the queued run ``new`` whose history (generation 0) is ``records``, in
        one transaction; raises ``RunConflict`` when ``new.run_id`` exists, and, with
        ``source`` (the run copied), ``RunNotFound`` once it is gone and ``Redacted``
        once it was redacted."""
        ...

    def get_run(self, run_id: str) -> RunRecord | None:
        """The run, or None."""
        ...

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
        """At most ``limit`` runs, newest first (``created_at`` descending, then
        ``run_id``), optionally filtered: ``status`` one status or several, ``since``
        created at or after, ``search`` a substring of the run id (case-sensitive, taken
        literally). ``after``: the ``(created_at, run_id)`` of the last run of the page
        before; only runs after it in that order are returned (keyset paging)."""
        ...

    def count_runs(
        self,
        workflow: str | None = None,
        since: float | None = None,
        version: str | None = None,
        *,
        queue: str | None = None,
        search: str | None = None,
    ) -> dict[str, int]:
        """How many runs (of ``workflow``, ``version`` and ``queue``, created at or after
        ``since``, whose id contains ``search``) have each status; statuses without runs
        are left out."""
        ...

    def runs_by_version(self) -> list[tuple[str, str | None, str, int]]:
        """Runs not finished (not completed, failed, cancelled or continued), counted per
        (workflow, version, status), ordered by them: what each version's workers must
        still drive before they stop."""
        ...

    def request_cancel(self, run_id: str, reason: str | None) -> RunRecord:
        """Ask for the run to be cancelled, in one transaction under its row lock; return
        the run as it is after.

        Raises ``RunNotFound``, and ``RunFinished`` for a run ``completed``, ``failed`` or
        ``continued``. A run ``cancelled`` already, or whose cancel was asked for already,
        is returned unchanged (the first reason stays). Otherwise sets
        ``cancel_requested_at``/``cancel_reason`` and writes ``run.cancel_requested``; a
        ``parked`` run wakes now (``wake_at`` = now; PostgreSQL NOTIFYs waiting workers in
        the same transaction) so it unwinds. A run whose code cannot run again without a
        person ends ``cancelled`` at once, in the same transaction (``run.cancelled``,
        ``error_type`` ``durably.Cancelled``, the reason as ``error_message``, a note as
        ``park_reason``): ``queued`` with no record in its current generation (nothing
        ran), ``blocked``, ``quarantined``, ``in_doubt`` (their cleanup does not run; to
        let it, retry the run first). That applies also when the flag was set already."""
        ...

    def requeue(
        self,
        run_id: str,
        from_statuses: Sequence[str],
        *,
        drop_intents: bool = False,
        drop_positions: Sequence[str] = (),
        resolve: tuple[str, str] | None = None,
    ) -> RunRecord:
        """An operator's retry/skip of a stuck or failed run: optionally drop every
        unresolved intent (``drop_intents``), or the intents and failures at
        ``drop_positions`` (never a result), or resolve one intent with an output; clear a
        failure outcome and a cancel request the run never acted on, reset the no-progress
        count, raise the fencing token and queue the run, all in one transaction. The
        incarnation (so every key) stays."""
        ...


class LeasesStore(Protocol):
    """The leases role: claim a run (or the next runnable one), renew and release the
    lease, wait for work."""

    def claim(
        self,
        run_id: str,
        owner: Owner,
        lease_s: float,
        max_starts: int,
        owner_dead: Callable[[str], bool],
    ) -> RunRecord:
        """Take the run's lease with a new fencing token and mark it running.

        Raises ``RunLeased`` while another live owner holds an unexpired lease (an owner for
        which ``owner_dead`` is true is taken over at once), ``RunQuarantined`` when the run
        has been started ``max_starts`` times without progress, ``RunNotFound``.
        """
        ...

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
        """Claim the oldest runnable run of ``queues`` whose workflow is in ``served``
        (workflow name -> the versions registered, None for the registration without a
        version; a run without a version goes to any of them), or return None. Runnable: queued;
        running with an expired lease, no owner or a dead owner; parked and due. A queue
        with ``queue_limits[q]`` runs already running across the fleet is skipped."""
        ...

    def wait_for_work(self, timeout_s: float) -> bool:
        """Block until new work may be runnable (a notification) or ``timeout_s`` passed;
        True when a notification ended the wait (a hint, never a promise)."""
        ...

    def renew(self, run_id: str, token: int, lease_s: float) -> bool:
        """Extend the lease; False when the token is stale."""
        ...

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
        """Give up the lease (fenced), optionally moving to a non-terminal status; the
        status's event and ``events`` are written with it when the token holds.
        ``error_type``: what blocked the run (``ConfigError``, ...), kept in its
        ``run.blocked`` event so ``durably runs why`` can say what to fix."""
        ...


class HistoryStore(Protocol):
    """The history role: a generation's records and blobs; append, finish and park (the
    fenced writes of a run's driver)."""

    def load_history(self, run_id: str, generation: int) -> list[StepRecord]:
        """All records of one generation of a run, in one query."""
        ...

    def get_blobs(self, digests: Sequence[str]) -> dict[str, str]:
        """The stored blobs among ``digests`` (content hashes), as text by digest; a
        digest not stored is left out. Each blob is checked against its sha256 on the way
        out: a changed one raises ``SerializationError`` naming it."""
        ...

    def append(
        self,
        run_id: str,
        token: int,
        records: Sequence[StepRecord],
        events: Sequence[NewEvent] = (),
    ) -> bool:
        """Write records in one transaction, fenced; a result replaces an intent. The
        records' blobs, and the ``events`` that describe them (numbered after the run's
        newest, each stored once by its dedupe name), commit in the same transaction.
        ``records`` may be empty: the events alone are written, fenced all the same
        (LeaseLost on a stale token).

        Returns True when a cancel was asked for the run (``runs.cancel_requested_at``),
        read by the same statements at no extra round trip: this is how a cancel is
        seen at every step boundary. A write found already stored (retried after an
        unknown outcome) returns the flag as it is now.

        Idempotent on identical, a conflict on different, each part by its own
        identity: a record equal to the one stored at its position is success and
        changes nothing (its events are still stored, unless stored already under their
        dedupe); a different record at a position holding a result (or a wait with
        another wake time) raises ``StoreError`` and nothing of the append is written,
        its events and blobs neither. An intent may replace an intent (a re-execution
        counts one more attempt). ``tests/contract/test_append_contract.py`` pins it."""
        ...

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
        """Write the last records, ``events`` and the run's outcome (with its event) in
        one fenced transaction."""
        ...

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
        """Park the run in one fenced transaction (``LeaseLost`` on a stale token): write
        ``records`` (with their blobs) and ``events``, set the status ``parked`` with
        ``park_reason``, ``wake_at`` and the signal names it waits for (``wait_signals``: a
        signal of any of them wakes it), give up the lease (no owner), and write a
        ``run.parked`` event (``kind``, the reason, the effective wake time). Each request
        the run waits on (``approvals``; deciding any of them wakes it) gets its
        ``approvals`` row in the same transaction, unless it has one. When a cancel was
        asked for, or an unconsumed signal of a waited name is already there, or a request
        waited on was already decided, the run wakes at once instead (wake_at = now):
        whoever sent it found the run not yet parked. Returns the effective wake time
        (None: no timer). PostgreSQL wakes waiting workers in the same transaction when
        the run is due at once."""
        ...


class SignalsStore(Protocol):
    """The signals role: send a signal to a run, take one in its driver."""

    def send_signal(self, run_id: str, name: str, data: str, send: str | None = None) -> int:
        """Store signal ``name`` with ``data`` (canonical JSON text) for the run and
        return its per-run sequence number (1, 2, ...), taken under the run's row lock,
        with a ``signal.received`` event in the same transaction. A run parked waiting
        for ``name`` is made due at once (PostgreSQL also notifies the workers): its wake
        time becomes the earlier of now and when it parked, so a sender whose clock runs
        ahead of the workers' delays nothing. Not
        fenced: any process may signal. Raises ``RunNotFound`` for an unknown run and
        ``RunFinished`` for one completed, failed, cancelled or continued.

        ``send`` names this send, the same on every retry of it: a send already stored
        under that name (the retry of a call whose commit outcome was unknown) stores
        nothing new and returns the stored signal's number, so a signal is never
        delivered twice. None: a fresh name (the call is not retried by its caller)."""
        ...

    def take_signal(
        self, run_id: str, token: int, name: str, consumer: str
    ) -> tuple[int, str] | None:
        """Consume one signal of ``name`` for the wait ``consumer`` (its position) and
        return ``(seq, data)``, or None when there is none. Fenced (``LeaseLost`` on a
        stale token). Idempotent: a signal already consumed by ``consumer`` (the reply
        was lost, or the process died before the wait was recorded) is returned again;
        otherwise the oldest unconsumed signal of ``name`` is taken (FIFO). A signal of
        another name taken by ``consumer`` (never recorded; a deploy renamed the wait
        since) goes back, unconsumed."""


class ApprovalsStore(Protocol):
    """The approvals role: pending requests, a decision, the driver's fenced read of it."""

    def pending_approvals(
        self, run_id: str | None = None, limit: int = APPROVALS_LIST_MAX
    ) -> list[ApprovalRow]:
        """Undecided approval requests of runs not finished and not being cancelled (of
        one run, or all), oldest request first, at most ``limit``."""
        ...

    def get_approval(self, run_id: str, request_id: str) -> ApprovalRow | None:
        """The approval request at ``request_id`` of the run (decided or not), or None."""
        ...

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
        """A person's decision (``outcome`` approved or rejected), under the run's row
        lock, in one transaction: ``RunNotFound``, ``RunFinished`` (the run ended, or a
        cancel was asked for: it unwinds and would never use the decision),
        ``ApprovalNotFound`` (no request there), ``ApprovalMismatch`` (``digest`` is not
        the request's) or ``ApprovalAlreadyDecided`` (decided, or past its expiry) change
        nothing. Otherwise the decision is written with an ``approval.decided`` event and
        a run parked on it is woken (wake_at = now; PostgreSQL NOTIFYs the workers).
        Returns the decided row."""
        ...

    def approval_decision(self, run_id: str, token: int, request_id: str) -> ApprovalRow | None:
        """For the run's driver (fenced by ``token``: ``LeaseLost``): the request's row,
        after expiring it in the same transaction when it is undecided and past its
        ``expires_at`` (outcome ``expired``, decided at ``expires_at``, with its
        ``approval.decided`` event), so an expiry and a person's decision can never both
        be taken. None when the run has no request there."""
        ...


class SpendStore(Protocol):
    """The spend role: the ledger of model usage and the run's budget."""

    def record_spend(self, run_id: str, entry: SpendEntry) -> Spend:
        """Add one call's usage to the run's spend ledger, in one transaction, once per
        ``entry.entry`` (a write retried after an unknown outcome adds nothing), and
        return the run's spend after it, with its stored budget. Not fenced: the call
        happened whoever holds the lease now."""
        ...

    def get_spend(self, run_id: str) -> Spend:
        """The run's spend (the ledger's sums across generations; zero without rows) and
        its stored budget (None when none was stored)."""
        ...

    def set_budget(self, run_id: str, token: int, budget: Budget) -> None:
        """Store the run's budget, replacing any stored one; fenced (``LeaseLost`` on a
        stale token)."""
        ...


class EventsStore(Protocol):
    """The events role: read a run's event stream, wait for it to grow."""

    def read_events(self, run_id: str, after: int, limit: int) -> EventPage | None:
        """Up to ``limit`` events of the run with cursor > ``after`` in cursor order, the
        cursor to read on from, and whether the run was terminal with nothing left past
        this page; None when the run does not exist."""
        ...

    def wait_for_events(self, run_id: str, timeout_s: float) -> None:
        """Block until the run may have new events (a notification) or ``timeout_s``
        passed. SQLite has no notifications: it just sleeps."""
        ...

    def publish(self, run_id: str, token: int, events: Sequence[NewEvent]) -> None:
        """Hand stream-only ``events`` of ``run_id`` (from the process holding ``token``)
        to the store's stream writer and return at once: they are written in batches on
        a connection of its own, never fsync'd, and dropped when ``token`` is no longer
        the run's (see :mod:`durably.store.streamwriter`). Never raises for the
        database's sake: an event it cannot write is lost to followers, nothing else."""
        ...

    def flush_stream(self, timeout_s: float) -> bool:
        """Wait, at most ``timeout_s``, until every event published before the call is
        written (or given up); True when it was."""
        ...


class FleetStore(Protocol):
    """The fleet role: owner liveness (the owner lock), the workers table, the database clock."""

    def hold_owner(self, owner: Owner) -> None:
        """Show the database that ``owner`` (this process) is alive, for as long as the
        process lives: PostgreSQL holds a session advisory lock on a connection of its
        own; SQLite has no such thing (a no-op). Idempotent."""
        ...

    def owner_lock_lost(self, ping: bool = True) -> bool:
        """True when the connection holding this process's owner lock died since
        ``hold_owner`` (the lock is free, so others may judge this process dead-looking:
        it must treat that as losing its leases). ``ping=False`` looks without a round
        trip (it sees a session the server ended, not a silent network cut); a ping also
        keeps the idle session from idle timeouts. Always False on SQLite."""
        ...

    def owners_without_lock(self, owners: Sequence[str]) -> set[str]:
        """The owners among ``owners`` that nothing shows alive: PostgreSQL, those whose
        advisory lock is free; SQLite, all of them (it has no lock to show). Never proof
        of death: a dropped connection frees a lock too."""
        ...

    def beat_worker(self, owner: Owner, queues: Sequence[str], ttl_s: float) -> None:
        """Record that worker ``owner`` (this process) serves ``queues`` and is alive for
        ``ttl_s`` more seconds; also prunes rows of workers dead for a day."""
        ...

    def drop_worker(self, owner: Owner) -> None:
        """Remove worker ``owner``'s row (it stopped)."""
        ...

    def live_workers(self) -> list[tuple[str, tuple[str, ...]]]:
        """``(owner, queues)`` of every worker whose last beat has not expired, at most
        ``fleet.WORKERS_MAX``. A live row is no proof of life: a worker killed since its
        last beat keeps its row until it expires."""
        ...

    def db_time(self) -> float | None:
        """The database server's clock (seconds since the epoch), or None when the
        database has no clock of its own (SQLite runs on this host)."""
        ...


@dataclass(frozen=True, slots=True)
class Generation:
    """A finished generation of a run (``ctx.continue_as_new`` ended it): its number,
    input (canonical JSON ``{"args": [...], "kwargs": {...}}``) and the input's sha256,
    its status (``continued``), how many records it holds and when it ended."""

    generation: int
    input: str
    input_digest: str
    status: str
    records: int
    finished_at: float


class GenerationsStore(Protocol):
    """The generations role (``ctx.continue_as_new``): the hand-over, and reads of the
    generations a run finished."""

    def continue_as_new(
        self,
        run_id: str,
        token: int,
        generation: int,
        records: Sequence[StepRecord],
        events: Sequence[NewEvent],
        input: str,
        input_digest: str,
    ) -> RunRecord:
        """In one fenced transaction (``LeaseLost`` on a stale token): write ``records``
        and ``events``, end ``generation`` (its ``generations`` row: input, records,
        ``continued``), move the run row to ``generation + 1`` with ``input``, and write a
        ``run.continued`` event; the lease and token stay. Returns the run's row. A retry
        after an unknown commit finds the hand-over done and returns the row."""
        ...

    def list_generations(self, run_id: str) -> list[Generation]:
        """The run's finished generations, oldest first."""
        ...

    def origin_digest(self, run_id: str) -> str | None:
        """Generation 0's input digest once the run has continued as new, else None."""
        ...


class RetentionStore(Protocol):
    """Prune finished runs, delete or redact one, tombstones, leases of background jobs
    (:mod:`durably.store.retention`)."""

    def prune(
        self,
        before: float,
        statuses: Sequence[str] = PRUNABLE,
        dry_run: bool = False,
        runs_max: int | None = None,
    ) -> Freed:
        """Delete finished runs that finished before ``before`` in bounded batches, each
        leaving a tombstone, then sweep the blobs only they cited; ``dry_run`` writes
        nothing. A run not finished is never read for deletion."""
        ...

    def delete_run(self, run_id: str, redact: bool = False, by: str = "") -> Freed:
        """Delete one finished run now (leaving its tombstone), or redact it."""
        ...

    def get_tombstone(self, run_id: str) -> Tombstone | None:
        """The tombstone of ``run_id``, or None."""
        ...

    def list_tombstones(
        self, limit: int = 100, after: tuple[float, str] | None = None
    ) -> list[Tombstone]:
        """Tombstones, newest first."""
        ...

    def drop_tombstones(self, before: float, dry_run: bool = False) -> int:
        """Remove tombstones of runs removed before ``before``; returns how many
        (``dry_run``: how many would go, nothing removed)."""
        ...

    def get_redaction(self, run_id: str) -> Redaction | None:
        """When and by whom the run was redacted, or None."""
        ...

    def take_maintenance(self, name: str, owner: str, ttl_s: float) -> bool:
        """Take or renew the lease of background job ``name``; False when held."""
        ...


class Store(
    RunsStore,
    LeasesStore,
    HistoryStore,
    GenerationsStore,
    SignalsStore,
    ApprovalsStore,
    SpendStore,
    EventsStore,
    FleetStore,
    RetentionStore,
    Protocol,
):
    """A journal database, every role at once. Every method is safe to call from any
    thread. The roles' semantics are written once (:mod:`durably.store.tx`); the
    backends are :class:`~durably.store.sqlite.SQLiteStore` and
    :class:`~durably.store.postgres.PostgresStore`."""

    url: str
    durability: str
    """The durability mode its commits keep (:mod:`durably.store.durability`)."""

    def close(self) -> None:
        """Release connections."""
        ...
