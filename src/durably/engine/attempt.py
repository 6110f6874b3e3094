"""One attempt at a run: begin (claim, load the history, build the core) -> the workflow
body -> conclude (completed), park, or finish (failed, cancelled, blocked, in doubt).

Every outcome is recorded in one fenced transaction. A latched stop outranks whatever the
workflow made of it, and durably's own failures (a lost lease, a store that failed) never
make a run terminal: the lease is given back and the error reaches the caller.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from typing import Any, NoReturn

from .. import codec
from .._callables import parameter_names
from .._fork import reset_after_fork
from .._record import Record
from ..errors import (
    Cancelled,
    CompensationFailed,
    ConfigError,
    DurablyError,
    HistoryTooLarge,
    LeaseLost,
    RunFinished,
    RunInDoubt,
    RunParked,
    RunQuarantined,
    SerializationError,
    StaleLease,
    StepFailed,
    StoreFailed,
    Unwind,
    WorkflowFailed,
    clause,
)
from ..history import (
    BLOCKED,
    CANCELLED,
    COMPLETED,
    ERROR_MESSAGE_CHARS_MAX,
    FAILED_RUN,
    IN_DOUBT,
    PARK_REASON_CHARS_MAX,
    QUARANTINED,
    RUN_RESULT_BYTES_MAX,
    RunRecord,
    describe_error,
    storable_text,
)
from ..journal.text import utc_text
from ..replay.kernel import RunCore, cancelled_error, type_name
from ..replay.park import ContinuedAsNew, Parked
from ..replay.setup import RunSetup
from ..runtime.drive import Executor, recording
from ..shell import command
from ..store.runs import CANCEL_ERROR_TYPE
from .base import Base
from .leases import Heartbeat, Leases
from .registry import Workflow

# What a parked run can wait for (Parked.reason); "in_doubt" waits for a person instead.
# "waits": several at once (ctx.gather branches that each parked; see replay.park.combine_parks).
PARK_KINDS = frozenset({"timer", "signal", "approval", "waits"})


class Attempt(Record):
    """One claim of a run: its core, executor, heartbeat and decoded input."""

    workflow: Workflow
    run: RunRecord
    core: RunCore
    executor: Executor
    heartbeat: Heartbeat
    args: list[Any]
    kwargs: dict[str, Any]

    def __init__(
        self,
        workflow: Workflow,
        run: RunRecord,
        core: RunCore,
        executor: Executor,
        heartbeat: Heartbeat,
        args: list[Any],
        kwargs: dict[str, Any],
    ) -> None:
        self.workflow = workflow
        self.run = run
        self.core = core
        self.executor = executor
        self.heartbeat = heartbeat
        self.args = args
        self.kwargs = kwargs


class RunContinued(Unwind):
    """Internal: the attempt handed its run over to the next generation (``run`` is the
    run's row after the hand-over, still leased to this process under the same token):
    the drive loop begins the next generation's attempt at once."""

    def __init__(self, run: RunRecord) -> None:
        self.run = run
        super().__init__(f"run {run.run_id!r} continued as generation {run.generation}")


class Final(Record):
    """The recorded outcome of a run that will not execute again."""

    value: Any

    def __init__(self, value: Any) -> None:
        self.value = value


class ActiveRuns:
    """The attempts this process is driving now, by run id (a cancel reaches them at once;
    a draining worker gives them back)."""

    def __init__(self) -> None:
        self._runs: dict[str, Attempt] = {}
        self._lock = threading.Lock()
        reset_after_fork(self)

    def _after_fork_in_child(self) -> None:
        """The runs the parent is driving are not this process's: forget them (so nothing
        here releases their leases), with a lock no parent thread can still hold."""
        self._runs = {}
        self._lock = threading.Lock()

    def __getitem__(self, run_id: str) -> Attempt:
        with self._lock:
            return self._runs[run_id]

    def get(self, run_id: str) -> Attempt | None:
        """The attempt driving ``run_id`` here, or None."""
        with self._lock:
            return self._runs.get(run_id)

    def all(self) -> list[Attempt]:
        """Every attempt driven here now."""
        with self._lock:
            return list(self._runs.values())

    def add(self, att: Attempt) -> None:
        """``att`` is driven here from now on."""
        with self._lock:
            self._runs[att.run.run_id] = att

    def discard(self, att: Attempt) -> None:
        """``att`` is no longer driven here (a later attempt of its run is left alone)."""
        with self._lock:
            if self._runs.get(att.run.run_id) is att:
                del self._runs[att.run.run_id]


class Attempts:
    """Begins and concludes attempts."""

    def __init__(self, base: Base, leases: Leases) -> None:
        self._base = base
        self._leases = leases
        self.active = ActiveRuns()

    def begin(self, w: Workflow, run: RunRecord, claimed: bool = False) -> Attempt | Final:
        """Claim the run (unless ``claimed``), load its history and build its core; a run
        that ended meanwhile gives its recorded outcome instead."""
        base, opts = self._base, self._base.opts
        if not claimed:
            final = final_outcome(w, run)
            if final is not None:
                return final
            try:
                run = self._leases.claim(run.run_id)
            except RunFinished:
                # Another process finished it since we looked: return its outcome.
                final = final_outcome(w, base.get_run(run.run_id))
                assert final is not None
                return final
        hb: Heartbeat | None = None
        try:
            history = base.call(lambda: base.store.load_history(run.run_id, run.generation))
            # The setup carries the driver's own view of its lease, on the engine's clock:
            # every live step checks it first (no I/O), so a process stopped past its
            # lease runs no step.
            setup = RunSetup.for_run(
                run,
                history,
                opts.clock,
                prompt_version=w.prompt_version,
                fetch_blobs=base.store.get_blobs,
                fault_hook=opts.fault_hook,
                history_warn=opts.history_warn,
                history_max=opts.history_max,
            )
            core = RunCore(setup)
            if run.cancel_requested_at is not None:
                # Cancelled before this claim (or while parked): the replay reaches where
                # it was, and the first position that would go live raises Cancelled.
                core.request_halt(cancelled_error(run.run_id, run.cancel_reason))
            hb = self._leases.keeper.add(core)
            ex = Executor(core, base.store, opts.clock, opts.store_retry_s, opts.lease_s)
            att = Attempt(w, run, core, ex, hb, [], {})
            att.args, att.kwargs = decode_input(w, run)
        except BaseException as exc:
            # A start that fails holds a lease it will never use: stop renewing it and give
            # the run back (blocked when its input cannot be decoded: a retry would too).
            if hb is not None:
                hb.stop()
            self._release_unstarted(run, exc)
            raise
        self.active.add(att)
        return att

    def _release_unstarted(self, run: RunRecord, exc: BaseException) -> None:
        try:
            if isinstance(exc, SerializationError):
                reason = storable_text(str(exc), PARK_REASON_CHARS_MAX)
                self._base.store.release(
                    run.run_id,
                    run.fencing_token,
                    BLOCKED,
                    park_reason=reason,
                    error_type=type(exc).__name__,
                )
            else:
                self._base.store.release(run.run_id, run.fencing_token)
        except DurablyError:
            # The lease expires instead (this process's own retry may take it over at
            # once); the error that stopped the start matters more.
            self._leases.not_released(run.run_id)

    def forget(self, att: Attempt) -> None:
        """Stop keeping the attempt's lease; it is no longer driven here."""
        att.heartbeat.stop()
        self.active.discard(att)

    def conclude(self, att: Attempt, result: Any) -> Any:
        """Record the workflow's ``result`` (the run completed) and return it as a
        workflow sees it on replay."""
        store = self._base.store
        core, run_id = att.core, att.run.run_id
        try:
            # Under the run's lock: a branch's thread records before the end or not at
            # all (its records are taken below), never beside the outcome's write.
            with att.executor.hold():
                core.guard()
                core.unconsumed_check()
                core.end("returned")
            try:
                out = codec.dumps(
                    result, f"workflow {att.workflow.name!r} result", RUN_RESULT_BYTES_MAX
                )
            except SerializationError as exc:
                # Blocked, not failed: return storable data and resume; recorded steps replay.
                raise core.poison(
                    SerializationError(
                        f"{clause(exc)}. The run is blocked: change the workflow to return storable"
                        f" data, then `{command('retry', run_id)}` (recorded steps replay)"
                    )
                ) from None
            records, events = core.take_pending(), core.take_events()
            self._record(
                core,
                lambda: store.finish(
                    run_id, core.token, COMPLETED, records, outcome=out, events=events
                ),
            )
        except BaseException as exc:
            self.conclude_error(att, exc)
            raise
        self.forget(att)
        return codec.loads(out, att.workflow.return_hint)

    def conclude_error(self, att: Attempt, exc: BaseException) -> None:
        """Record why the attempt ended, then let the caller re-raise (or translate).

        A latched stop outranks whatever the workflow made of it (a bare ``except:`` that
        raised something else, or returned). A store failure, here or while recording the
        outcome, never makes the run terminal: the lease is given back (so a retry from
        this process is not refused) and the ``StoreError`` reaches the caller.
        """
        store = self._base.store
        core, run_id, token = att.core, att.run.run_id, att.core.token
        with att.executor.hold():  # see conclude
            core.end("raised" if not isinstance(exc, Parked) else "parked")
        self.forget(att)
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
                    lambda: store.release(
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
            if isinstance(signal, ContinuedAsNew):
                self._hand_over(att, signal)
            if isinstance(signal, HistoryTooLarge):
                # Not the workflow's failure: its history outgrew the bound. Blocked (a
                # resume after the code continues as new, or a raised bound, goes on).
                self._block(core, run_id, token, signal)
                return
            if isinstance(signal, Parked) and signal.reason in PARK_KINDS:
                self._park(core, run_id, token, signal)
            if isinstance(signal, Parked) and signal.reason == IN_DOUBT:
                why = storable_text(core.in_doubt or "", PARK_REASON_CHARS_MAX)
                events = core.take_events()
                self._record(
                    core, lambda: store.release(run_id, token, IN_DOUBT, why, events=events)
                )
                raise RunInDoubt(f"run {run_id!r} is in doubt: {core.in_doubt}") from None
            if isinstance(signal, Exception):
                records, events = core.take_pending(), core.take_events()
                self._record(
                    core,
                    lambda: store.finish(
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
            self._leases.give_back(run_id, token)
        except LeaseLost as lost:
            # Our lease may only have run out locally: releasing it (a stale token changes
            # nothing) lets the next owner start at once.
            self._leases.give_back(run_id, token)
            raise StaleLease(run_id, token, lost.reason, lost.taken) from None
        except StoreFailed as failed:
            self._leases.give_back(run_id, token)
            raise failed.error from (exc if exc is not failed else None)

    def _block(self, core: RunCore, run_id: str, token: int, exc: DurablyError) -> None:
        """Give the run back ``blocked`` with ``exc``'s message as its reason."""
        reason = storable_text(str(exc), PARK_REASON_CHARS_MAX)
        events = core.take_events()
        kind = type(exc).__name__  # runs why: what to fix
        self._record(
            core,
            lambda: self._base.store.release(
                run_id, token, BLOCKED, reason, events=events, error_type=kind
            ),
        )

    def _hand_over(self, att: Attempt, cont: ContinuedAsNew) -> NoReturn:
        """``ctx.continue_as_new``: end this generation and start the next with the new
        input, in one fenced transaction, then raise ``RunContinued`` with the run's row
        (still leased here) for the drive loop. New input the workflow cannot take blocks
        the run at once (the next generation would only fail to start)."""
        core, run_id = att.core, att.run.run_id
        import inspect  # continue_as_new only

        try:
            inspect.signature(att.workflow.fn).bind(None, *cont.call_args, **cont.call_kwargs)
        except TypeError as exc:
            bad = core.poison(
                ConfigError(
                    f"ctx.continue_as_new(...): workflow {att.workflow.name!r} cannot take"
                    f" these arguments ({exc}); pass what its parameters after the context"
                    " take. The run is blocked; fix the code, then resume it."
                )
            )
            self._block(core, run_id, core.token, bad)
            raise bad from None
        records, events = core.take_pending(), core.take_events()
        done: list[RunRecord] = []
        self._record(
            core,
            lambda: done.append(
                self._base.store.continue_as_new(
                    run_id,
                    core.token,
                    core.generation,
                    records,
                    events,
                    cont.input,
                    cont.input_digest,
                )
            ),
        )
        raise RunContinued(done[-1])

    def _finish_cancelled(self, core: RunCore, run_id: str, halted: Cancelled) -> NoReturn:
        """Record the run ``cancelled`` (its pending records with the halt marker, the
        reason as its message) and raise ``Cancelled`` for the caller of ``engine.run``."""
        reason = halted.reason
        message = None if reason is None else storable_text(reason, ERROR_MESSAGE_CHARS_MAX)
        records, events = core.take_pending(), core.take_events()
        self._record(
            core,
            lambda: self._base.store.finish(
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
                self._base.store.park(
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

    def _record(self, core: RunCore, op: Callable[[], None]) -> None:
        """Record an outcome through ``op`` (retried); a refusal or a store failure is
        latched in the core and raised as its stop signal."""
        with recording(core):
            self._base.call(op)


def final_outcome(w: Workflow, run: RunRecord) -> Final | None:
    """The recorded outcome of a run that will not execute again, else None."""
    if run.status == COMPLETED:
        return Final(codec.loads(run.outcome or "null", w.return_hint))
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


def park_reason(parked: Parked) -> str:
    """The ``park_reason`` recorded for a parked run: ``timer until 2026-11-30T10:00:00Z``
    (what ``durably runs list``/``show``/``why`` print)."""
    if parked.detail is not None:
        return parked.detail
    until = "" if parked.wake_at is None else f" until {utc_text(parked.wake_at)}"
    return f"{parked.reason}{until}"


def _failure_type(exc: BaseException) -> str:
    return exc.type_name if isinstance(exc, StepFailed) else type_name(exc)


def _failure_message(exc: BaseException) -> str:
    text = exc.message if isinstance(exc, StepFailed) else describe_error(exc)
    return storable_text(text, ERROR_MESSAGE_CHARS_MAX)


def decode_input(w: Workflow, run: RunRecord) -> tuple[list[Any], dict[str, Any]]:
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
    names = parameter_names(w.fn)[1:]
    typed = [
        codec.coerce(a, w.param_hints.get(names[i]) if i < len(names) else None)
        for i, a in enumerate(args)
    ]
    return typed, {k: codec.coerce(v, w.param_hints.get(k)) for k, v in kwargs.items()}
