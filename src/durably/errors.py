"""The exception tree of durably.

Every error a user can meet derives from :class:`DurablyError`, and every message says
what happened and what to do about it. Internal control-flow signals that must never be
swallowed by a workflow's ``except Exception`` (parking, losing a lease, injected crashes)
derive from :class:`BaseException` instead; see :class:`Unwind`.
"""

from __future__ import annotations

from typing import Any

from .shell import command


def clause(text: object) -> str:
    """``text`` (often an exception) without its final period, for a message that goes on
    with a sentence of its own: "{clause(exc)}. The run is blocked" never reads ".. The"."""
    return str(text).rstrip(".")


class DurablyError(Exception):
    """Base class of every error durably raises on purpose.

    Each one pickles with the arguments it was made with (a subclass's ``__init__`` that
    takes several and passes one message on would otherwise fail to unpickle): it crosses
    a process boundary intact (``multiprocessing``, ``concurrent.futures`` process pools,
    task queues)."""

    _made_with: tuple[tuple[Any, ...], dict[str, Any]]

    def __new__(cls, *args: Any, **kwargs: Any) -> DurablyError:
        self = super().__new__(cls, *args)
        self._made_with = (args, kwargs)
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        args, kwargs = getattr(self, "_made_with", (self.args, {}))
        state = {k: v for k, v in self.__dict__.items() if k != "_made_with"}
        return (_remade, (type(self), args, kwargs), state)


def _remade(cls: type[DurablyError], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """An error made again from its arguments (unpickling; see :class:`DurablyError`)."""
    return cls(*args, **kwargs)


class ConfigError(DurablyError):
    """A URL, option or argument given to durably is not valid."""


class StoreError(DurablyError):
    """The journal database cannot be used as it is.

    ``transient`` tells whether the same call may succeed if tried again later (a busy or
    locked database, a dropped or refused connection, a serialization failure or deadlock,
    a full disk); the engine retries those with bounded backoff. A permanent error (a
    schema or corruption problem) is not retried. Either way, a store error while recording
    never becomes the workflow's error: the run stops, stays resumable, and the error
    reaches the caller of ``engine.run`` (a worker logs it).
    """

    transient = False


class NotADurablyDatabase(StoreError):
    """The database file exists but is not a durably journal, or is corrupt."""


class StoreBusy(StoreError):
    """The database stayed locked by another process longer than the busy timeout."""

    transient = True


class StoreUnavailable(StoreError):
    """The database server could not be reached or dropped the connection (refused,
    terminated, shut down), or aborted the transaction (serialization failure, deadlock):
    trying again later may succeed."""

    transient = True


class StoreDiskFull(StoreError):
    """The disk (or the database's size limit) is full: nothing more can be recorded until
    space is freed."""

    transient = True


class SchemaTooNew(StoreError):
    """The database was written by a newer durably than this one."""


class SchemaNotMigrated(StoreError):
    """The tables are missing or older than this durably needs: run ``durably migrate``."""


class CorruptRecord(ValueError):
    """A record read from, or about to be written to, the journal breaks an invariant."""


class SerializationError(DurablyError):
    """A value crossing the journal cannot be encoded to, or decoded from, JSON."""


class NonDeterminism(DurablyError):
    """The workflow code asked for something other than what its history recorded.

    The run is marked ``blocked``: fix the code (or route the run to workers of its
    version) and run it again; nothing recorded is lost.
    """


class StepFailed(DurablyError):
    """A step failed for good (after its retries), live or on replay.

    ``type_name`` and ``message`` describe the original error; when the failure happened
    live, ``__cause__`` is the original exception itself.
    """

    def __init__(self, step: str, position: str, type_name: str, message: str) -> None:
        self.step = step
        self.position = position
        self.type_name = type_name
        self.message = message
        super().__init__(f"step {position} {step!r} failed: {type_name}: {message}")


class StepTimeout(DurablyError, TimeoutError):
    """One attempt of a step ran longer than its ``timeout_s``."""


class WorkflowFailed(DurablyError):
    """The workflow raised; the failure is recorded and replays identically."""

    def __init__(self, run_id: str, type_name: str, message: str) -> None:
        self.run_id = run_id
        self.type_name = type_name
        self.message = message
        super().__init__(f"run {run_id!r} failed: {type_name}: {message}")


class RunNotFound(DurablyError):
    """No run with this run_id exists in the journal."""


class RunFinished(DurablyError):
    """The run has already finished, so it cannot take this request."""


class RunPruned(RunFinished):
    """The run finished and was pruned or deleted: only its tombstone is left, so it can
    be neither run again (its effects would happen twice) nor read."""


class RunRedacted(RunFinished):
    """The run's values were replaced by a marker (``durably runs delete --redact``): it
    keeps its shape for reading, and nothing can run, retry, fork or replay it."""


class RunNotFinished(DurablyError):
    """The run has not finished, so it cannot be deleted or redacted yet."""


class RunConflict(DurablyError):
    """A run_id was reused with another workflow or another input."""


class RunLeased(DurablyError):
    """Another live process holds the run's lease, so this one may not drive it."""


class RunQuarantined(DurablyError):
    """The run was started too many times without progress and is set aside."""


class RunBlocked(DurablyError):
    """The run is blocked (a non-determinism, a value the journal cannot store, or a
    mistake in the code such as a naive datetime: its reason says which) and waits for
    fixed code and ``durably retry``."""


class RunInDoubt(DurablyError):
    """An effect step was in flight when its process died and can be neither deduplicated
    nor looked up; a person decides with ``durably retry`` or ``durably skip``."""


class RunParked(DurablyError):
    """The run is parked (a timer, a signal, an approval) and this call stopped waiting
    for it: ``engine.run``/``run_async``/``resume`` past the engine's ``park_wait_s``, or
    a worker's drive (which frees its slot and counts the run as parked).

    The run is not lost and not failed: it stays parked, a row in the journal, until
    ``wake_at`` (seconds since the epoch; None when it waits without a timer).
    """

    def __init__(self, run_id: str, reason: str, wake_at: float | None) -> None:
        self.run_id = run_id
        self.reason = reason
        self.wake_at = wake_at
        # A signal wait is due only when its signal comes (or its timeout passes): say how
        # to send one, or the reader waits for a worker that has nothing to do.
        due = (
            f" (due once the signal is sent: engine.signal({run_id!r}, NAME, data) or"
            f" `{command('signal', run_id, 'NAME', options='--data JSON')}`, or its timeout passes)"
            if reason.startswith("signal ")
            else ""
        )
        super().__init__(
            f"run {run_id!r} is parked ({reason}) and stays parked{due}: a worker"
            " (`durably worker MODULE:ENGINE`) resumes it when it is due, or call"
            f" engine.run(..., run_id={run_id!r}) or engine.resume({run_id!r}) again to"
            " wait for it here"
        )


class WorkflowNotRegistered(DurablyError):
    """The run names a workflow this engine does not know."""


class Cancelled(DurablyError):
    """The run was cancelled (``engine.cancel``); ``reason`` is the one given, if any.

    Raised in the workflow at its next recording call that would go live, and again at
    every later one (the cancel is latched): catching it can clean up, never continue
    live work. The run ends ``cancelled`` whatever the workflow does."""

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason


class BudgetExceeded(DurablyError):
    """The run spent more than its budget allows (latched like ``Cancelled``)."""


class CompensationFailed(DurablyError):
    """A saga's compensation failed for good (after its own retries): the run ends
    ``failed`` with this error, naming both the error that set off compensation and the
    first compensation that failed.

    Compensation is best effort: after a failed compensation the remaining ones still
    run, and this is raised once all have been tried. ``error`` describes what set off
    compensation, ``failures`` holds every compensation's ``StepFailed`` (first failed
    first) and ``total`` counts the compensations tried. What a failed compensation
    should have undone may still be in place in the receiving system: a person checks it.
    """

    def __init__(
        self, run_id: str, error: str, failures: tuple[StepFailed, ...], total: int
    ) -> None:
        self.run_id = run_id
        self.error = error
        self.failures = failures
        self.total = total
        first = failures[0]
        others = total - len(failures)
        tally = (
            f"{len(failures)} of {total} compensations failed, the other {others} ran"
            if others
            else f"{len(failures)} of {total} compensations failed"
        )
        super().__init__(
            f"compensation failed: {first} ({tally}). It was compensating for: {clause(error)}."
            f" What the failed compensation should have undone may still be in place:"
            f" check the receiving system and undo it by hand (`{command('runs show', run_id)}`"
            " lists what ran)"
        )


class IdempotencyKeyReused(DurablyError):
    """The same idempotency key arrived with a different request fingerprint."""


class IdempotencyKeyInFlight(DurablyError):
    """A request with this idempotency key is still being processed."""


class ApprovalMismatch(DurablyError):
    """An approval named a digest other than that of the pending action; nothing was
    changed (the request still waits)."""


class ToolRejected(DurablyError):
    """A tool that asks a person first (``@durably.tool(kind="destructive")``) was not
    run: its approval request was rejected or expired. ``tool``, ``outcome``
    (``"rejected"`` or ``"expired"``), ``by`` and ``note`` say which and why.
    ``durably.tools.dispatch`` hands it to the model as a tool error."""

    def __init__(self, tool: str, outcome: str, by: str | None, note: str | None) -> None:
        self.tool = tool
        self.outcome = outcome
        self.by = by
        self.note = note
        who = f" by {by}" if by else ""
        noted = f" ({note})" if note else ""
        super().__init__(
            f"tool {tool!r} was not run: its approval request was {outcome}{who}{noted}."
            " Nothing was executed; to try again, ask in a new request (a new call)"
        )


class ApprovalNotFound(DurablyError, LookupError):
    """The run has no approval request at this ``request_id`` (its position)."""


class ApprovalAlreadyDecided(DurablyError):
    """The approval request was already decided (or expired): a request takes one
    decision. ``outcome``, ``by`` and ``decided_at`` (seconds since the epoch) say which,
    by whom and when."""

    def __init__(
        self,
        run_id: str,
        request_id: str,
        outcome: str,
        by: str | None,
        decided_at: float | None,
    ) -> None:
        import datetime as dt

        self.run_id = run_id
        self.request_id = request_id
        self.outcome = outcome
        self.by = by
        self.decided_at = decided_at
        when = (
            "at an unknown time"
            if decided_at is None
            else "at " + dt.datetime.fromtimestamp(decided_at, dt.UTC).isoformat(timespec="seconds")
        )
        who = (
            "nobody decided in time"
            if outcome == "expired"
            else f"by {by!r}"
            if by
            else "by someone who gave no name"
        )
        verb = "expired" if outcome == "expired" else outcome
        super().__init__(
            f"run {run_id!r} request {request_id} was already {verb} ({who}) {when}; a"
            " request takes one decision, so nothing was changed"
        )


class HistoryTooLarge(DurablyError):
    """A run's current generation reached its hard limit of records or bytes
    (``Engine(history_max=...)``): raised by the next recording call, before it writes.

    Not latched: a workflow may catch it and call ``ctx.continue_as_new(state)`` (allowed
    at the limit), which starts a fresh generation carrying ``state``. Uncaught, the run
    is ``blocked`` with this advice. ``records``/``bytes`` are the generation's size,
    ``limit`` the ``(records, bytes)`` bound."""

    def __init__(self, run_id: str, records: int, size: int, limit: tuple[int, int]) -> None:
        self.run_id = run_id
        self.records = records
        self.bytes = size
        self.limit = limit
        super().__init__(
            f"run {run_id!r}: its history holds {records:,} records and {size:,} bytes in"
            f" this generation, at its limit (history_max=({limit[0]:,}, {limit[1]:,})), so"
            " the recording call was refused before writing. A long-lived workflow should"
            " carry its state into a fresh history: catch durably.HistoryTooLarge (or check"
            " a counter) and `return ctx.continue_as_new(state)`; or raise"
            " Engine(history_max=...). An uncaught one blocks the run; after the fix,"
            f" `{command('retry', run_id)}` resumes it (recorded steps replay)."
        )


class SignalQueueFull(DurablyError):
    """``engine.signal`` refused a signal: the run already holds ``SIGNALS_PENDING_MAX``
    signals it has not consumed (a sender loops faster than the run waits)."""


class StaleLease(DurablyError):
    """This process no longer owns the run: another claim raised the fencing token.

    The process stops driving the run at once and runs no further effect for it. Inside a
    workflow the loss travels as :class:`LeaseLost` (a BaseException, so user code cannot
    swallow it); ``engine.run`` and workers surface it as this error.
    """

    def __init__(
        self, run_id: str, token: int, reason: str | None = None, taken: bool | None = None
    ) -> None:
        self.run_id = run_id
        self.token = token
        self.reason = reason
        self.taken = reason is None if taken is None else taken
        """True when the journal refused the token (another owner holds the run); False
        when only this process's own lease deadline passed (``reason`` says so)."""
        if reason is None:
            super().__init__(
                f"run {run_id!r}: fencing token {token} is stale; another owner has claimed"
                " the run, so this process stopped driving it (nothing it recorded is lost;"
                " the new owner carries on)"
            )
        elif self.taken:
            super().__init__(
                f"run {run_id!r}: this process {reason}, and its fencing token {token} is"
                " stale: another owner has claimed the run, so this process stopped driving"
                " it (nothing it recorded is lost; the new owner carries on)"
            )
        else:
            super().__init__(
                f"run {run_id!r}: this process {reason}, so another owner may have claimed"
                " the run; it stopped driving it and gave it back (nothing it recorded is"
                " lost; the run resumes on its next claim)"
            )


class Unwind(BaseException):
    """Internal signal that unwinds a workflow without it being able to catch it.

    It derives from BaseException so that ``except Exception`` in user code never swallows
    it and it is never a reason to run compensations.
    """


class ReplayEnd(Unwind):
    """Internal: under ``durably replay --check`` the run reached the end of its recorded
    history (the next call would go live), so the check of this run stops there."""

    def __init__(self, position: str) -> None:
        super().__init__(f"recorded history ends at position {position}")
        self.position = position


class LeaseLost(Unwind):
    """Internal: an append or renewal was refused because the fencing token is stale
    (``taken``), or the driver's own lease deadline passed (``reason`` says so; both may
    hold: a refusal after a pause)."""

    def __init__(
        self, run_id: str, token: int, reason: str | None = None, taken: bool | None = None
    ) -> None:
        self.run_id = run_id
        self.token = token
        self.reason = reason
        self.taken = reason is None if taken is None else taken
        why = f": {reason}" if reason else ""
        super().__init__(f"run {run_id!r}: lease lost (token {token}){why}")


class StoreFailed(Unwind):
    """Internal: recording failed for a store reason (after retrying a transient error);
    the run stops where it is, resumable, and ``error`` reaches the caller."""

    def __init__(self, error: StoreError) -> None:
        self.error = error
        super().__init__(f"recording stopped: {error}")
