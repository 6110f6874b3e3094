"""What a workflow sees: :class:`Context` (sync) and :class:`AsyncContext` (async).

Both are thin facades over one :class:`~durably.core.RunCore`; the two drivers below
execute the operations the core yields (call a function, write records, wait). A workflow
must get every non-deterministic value through its context: the current time, random
numbers, UUIDs, model and tool calls.

``asyncio`` is imported only where async code runs: it costs tens of milliseconds, and
resume time (import to first live step) is a target.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import inspect
import threading
import weakref
from abc import abstractmethod
from collections.abc import Awaitable, Callable, Coroutine, Generator, Iterator
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from ._fork import reset_after_fork
from .budget import Budget
from .clock import Clock, SystemClock
from .core import (
    SCOPE,
    Call,
    Charge,
    Op,
    Outcome,
    ReadDecision,
    ReadSpend,
    RunCore,
    Scope,
    SetBudget,
    TakeSignal,
    Wait,
    Write,
    cancelled_error,
    combine_parks,
)
from .current import inside_step
from .errors import (
    Cancelled,
    ConfigError,
    LeaseLost,
    Parked,
    StepTimeout,
    StoreError,
    StoreFailed,
)
from .history import APPROVAL, SIGNAL, SLEEP, WAITING
from .limits import SETTLE_TURNS_MAX as SETTLE_TURNS_MAX
from .limits import SYNC_STEP_THREADS_MAX as SYNC_STEP_THREADS_MAX
from .steps import USAGE, Usage, fn_text
from .store import retry
from .store.base import Store

if TYPE_CHECKING:
    import uuid

    from .approvals import ApprovalRow, Decision
    from .saga import AsyncSaga, Saga
    from .streaming import AsyncStepStream, ChunkHook, StepStream

T = TypeVar("T")

# The asyncio tasks running a saga's exit (its compensations) right now: a gather whose
# branch failed does not cancel such a sibling, whose undo steps would stop half-way
# (the saga's marker recorded, its steps neither undone nor reported), but waits for it.
COMPENSATING_TASKS: weakref.WeakSet[Any] = weakref.WeakSet()


class Executor:
    """Carries out a core's operations against a store and a clock.

    ``store_retry_s`` bounds (in waits summed) the retrying of a transient store error.
    """

    def __init__(
        self,
        core: RunCore,
        store: Store,
        clock: Clock,
        store_retry_s: float = retry.STORE_RETRY_S_DEFAULT,
        lease_s: float | None = None,
    ) -> None:
        self.core = core
        self.store = store
        self.clock = clock
        self.store_retry_s = store_retry_s
        self.lease_s = lease_s

    def refresh_lease(self) -> None:
        """After a wait on the clock (a retry's backoff), renew the lease now if its
        deadline is near or past: on an injected clock the heartbeat thread (which runs on
        real time) cannot keep up with a long backoff. The renewal is fenced, so it
        succeeds only if no one claimed the run meanwhile; refused, the lease-lost stop is
        latched. On the real clock the heartbeat has renewed already and this does no
        I/O."""
        core = self.core
        if self.lease_s is None or core.lease_deadline is None or core.stopped is not None:
            return
        asked_at = self.clock.time()
        if asked_at < core.lease_deadline - self.lease_s / 2:
            return
        try:
            renewed = self.store.renew(core.run_id, core.token, self.lease_s)
        except StoreError:
            return  # the deadline check before the next attempt decides
        if renewed:
            core.lease_deadline = asked_at + self.lease_s
        else:
            core.lease_lost = True

    def write(self, op: Write) -> Generator[float, None, None]:
        """Append records, fenced by the core's token; yields the pauses to wait between
        attempts after a transient store error.

        When the append reports a cancel asked for, the core is asked to halt the
        workflow with ``Cancelled`` at its next position that would go live.

        A store error never reaches the workflow as an ordinary exception: a refused
        append (another owner) or a store that still fails after the retries latches a stop
        in the core (``LeaseLost`` / ``StoreFailed``, both BaseExceptions), so every later
        recording call stops too, whatever the workflow catches.
        """
        core = self.core
        with recording(core):
            cancel = yield from retry.attempts(
                lambda: self.store.append(core.run_id, core.token, op.records, op.events),
                self.store_retry_s,
            )
            if cancel and core.halted is None and not isinstance(core.halt_requested, Cancelled):
                # The append saw the cancel flag (no query of its own): read the reason
                # once, and the workflow stops at its next position that would go live
                # (a crossed budget not delivered yet gives way to it: request_halt).
                run = yield from retry.attempts(
                    lambda: self.store.get_run(core.run_id), self.store_retry_s
                )
                reason = run.cancel_reason if run is not None else None
                core.request_halt(cancelled_error(core.run_id, reason))

    def take_signal(self, op: TakeSignal) -> Generator[float, None, tuple[int, str] | None]:
        """Consume a signal for the wait at ``op.consumer``, fenced by the core's token;
        yields the pauses between attempts after a transient store error. A refusal or
        a store that still fails is latched like a refused write (see :meth:`write`);
        a retry after an unknown outcome is safe: the store hands the same consumer the
        same signal again."""
        core = self.core
        with recording(core):
            return (
                yield from retry.attempts(
                    lambda: self.store.take_signal(core.run_id, core.token, op.name, op.consumer),
                    self.store_retry_s,
                )
            )

    def read_decision(self, op: ReadDecision) -> Generator[float, None, ApprovalRow | None]:
        """Read (and, when due, expire) the approval request at ``op.request_id``, fenced
        by the core's token; yields the pauses between attempts after a transient store
        error. A refusal or a store that still fails is latched like a refused write (see
        :meth:`write`). Asking again is safe: a decided request stays decided."""
        core = self.core
        with recording(core):
            return (
                yield from retry.attempts(
                    lambda: self.store.approval_decision(core.run_id, core.token, op.request_id),
                    self.store_retry_s,
                )
            )

    def ledger(self, op: Charge | ReadSpend | SetBudget) -> Generator[float, None, Any]:
        """Carry out a ledger or budget operation (retried like a write); returns the
        run's spend for :class:`Charge` and :class:`ReadSpend`.

        A ledger row is not fenced: the call it counts happened whoever holds the lease
        now (a stale owner's result write is refused right after). Storing the budget is
        fenced like any write of the run's state.
        """
        core, store = self.core, self.store
        if isinstance(op, Charge):
            fn: Callable[[], Any] = lambda: store.record_spend(core.run_id, op.entry)  # noqa: E731
        elif isinstance(op, ReadSpend):
            fn = lambda: store.get_spend(core.run_id)  # noqa: E731
        else:
            fn = lambda: store.set_budget(core.run_id, core.token, op.budget)  # noqa: E731
        with recording(core):
            return (yield from retry.attempts(fn, self.store_retry_s))


@contextlib.contextmanager
def recording(core: RunCore) -> Iterator[None]:
    """Around a store call that records for ``core``: a refused write (``LeaseLost``) or a
    ``StoreError`` is latched in the core as its stop signal and raised as that signal
    (a BaseException), never as an ordinary exception the workflow could catch."""
    try:
        yield
    except LeaseLost as exc:
        core.latch(exc)
        raise
    except StoreError as exc:
        stop = StoreFailed(exc)
        core.latch(stop)
        raise stop from exc


def drive_sync(ex: Executor, gen: Generator[Op, Any, T]) -> T:
    """Run a core generator to completion in this thread."""
    reply: Any = None
    while True:
        try:
            op = gen.send(reply)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        try:
            reply = op_sync(ex, op)
        except BaseException:
            gen.close()  # the core's cleanup (its scope is no longer busy) runs now
            raise


def op_sync(ex: Executor, op: Op) -> Any:
    """Carry out one operation in this thread; returns the reply for the core."""
    if isinstance(op, Call):
        return _call_sync(op)
    if isinstance(op, Write):
        for pause in ex.write(op):
            ex.clock.sleep(pause)
        return None
    if isinstance(op, TakeSignal):
        return retry_sync(ex.take_signal(op), ex.clock)
    if isinstance(op, Charge | ReadSpend | SetBudget):
        return retry_sync(ex.ledger(op), ex.clock)
    if isinstance(op, ReadDecision):
        return retry_sync(ex.read_decision(op), ex.clock)
    ex.clock.sleep(op.seconds)
    ex.refresh_lease()
    return None


async def drive_async(ex: Executor, gen: Generator[Op, Any, T]) -> T:
    """Run a core generator to completion on the running event loop."""
    reply: Any = None
    while True:
        try:
            op = gen.send(reply)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        try:
            reply = await op_async(ex, op)
        except BaseException:  # cancelled (a failed gather, a timeout), a store error
            gen.close()  # the core's cleanup (its scope is no longer busy) runs now
            raise


async def op_async(ex: Executor, op: Op) -> Any:
    """Carry out one operation on the running event loop; returns the reply."""
    if isinstance(op, Call):
        return await _call_async(op)
    if isinstance(op, Write):
        # One short fenced commit; a thread hop would cost more than it saves.
        for pause in ex.write(op):
            await _wait_async(ex.clock, Wait(pause))
        return None
    if isinstance(op, TakeSignal | Charge | ReadSpend | SetBudget | ReadDecision):
        # One short transaction or read, like a write: no thread hop.
        calls: Generator[float, None, Any]
        if isinstance(op, TakeSignal):
            calls = ex.take_signal(op)
        elif isinstance(op, ReadDecision):
            calls = ex.read_decision(op)
        else:
            calls = ex.ledger(op)
        while True:
            try:
                pause = next(calls)
            except StopIteration as stop:
                return stop.value
            await _wait_async(ex.clock, Wait(pause))
    await _wait_async(ex.clock, op)
    ex.refresh_lease()
    return None


def retry_sync(gen: Generator[float, None, T], clock: Clock) -> T:
    """Run a store-retry generator to its value, waiting out its pauses on ``clock``."""
    while True:
        try:
            pause = next(gen)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        clock.sleep(pause)


def _call_sync(op: Call) -> Outcome:
    box = Usage()
    token = USAGE.set(box)
    try:
        with inside_step(op.info):
            return _run_sync(op, box)
    finally:
        USAGE.reset(token)


def _run_sync(op: Call, box: Usage) -> Outcome:
    try:
        if op.is_async:
            raise ConfigError(
                f"{fn_text(op.fn)!r} is an async function: call it from an async workflow"
                " (async def, await ctx.step(...)), or pass a sync function"
            )
        if op.timeout_s is None:
            value = op.fn(*op.args, **op.kwargs)
        else:
            value = _call_with_timeout(op)
        if inspect.isawaitable(value):
            if inspect.iscoroutine(value):
                value.close()
            raise ConfigError(f"{fn_text(op.fn)!r} returned an awaitable: use an async workflow")
        return Outcome(value, None, box)
    except Exception as exc:
        return Outcome(None, exc, box)


def _call_with_timeout(op: Call) -> Any:
    """Run one attempt in a helper thread and stop waiting after ``timeout_s``.

    Python cannot kill a thread: a timed-out attempt keeps running in the background and
    its result is ignored; the retry (if any) carries the same idempotency key.
    """
    result: list[Any] = []
    error: list[BaseException] = []
    ctx = contextvars.copy_context()

    def target() -> None:
        try:
            result.append(ctx.run(op.fn, *op.args, **op.kwargs))
        except BaseException as exc:
            error.append(exc)

    t = threading.Thread(target=target, daemon=True, name="durably-step")
    t.start()
    t.join(op.timeout_s)
    if t.is_alive():
        name = fn_text(op.fn)
        raise StepTimeout(f"{name!r} ran past timeout_s={op.timeout_s}; the attempt failed")
    if error:
        raise error[0]
    return result[0]


async def _call_async(op: Call) -> Outcome:
    import asyncio

    box = Usage()
    # Set before the thread's context is copied: it reaches the box, and the step thread
    # sees the step as durably.current_step() (and no workflow context).
    token = USAGE.set(box)
    try:
        with inside_step(op.info):
            if op.timeout_s is None:
                value = await _invoke(op)
            else:
                try:
                    value = await asyncio.wait_for(_invoke(op), op.timeout_s)
                except TimeoutError:
                    raise StepTimeout(
                        f"{fn_text(op.fn)!r} ran past timeout_s={op.timeout_s}; the attempt failed"
                    ) from None
        return Outcome(value, None, box)
    except Exception as exc:
        return Outcome(None, exc, box)
    finally:
        USAGE.reset(token)


async def _invoke(op: Call) -> Any:
    """One attempt: an async function on the loop, a sync one in a step thread (so it
    neither blocks the loop nor escapes ``timeout_s``)."""
    value = op.fn(*op.args, **op.kwargs) if op.is_async else await _in_thread(op)
    if inspect.isawaitable(value):
        value = await value
    return value


async def _in_thread(op: Call) -> Any:
    import asyncio

    loop = asyncio.get_running_loop()
    fut: asyncio.Future[Any] = loop.create_future()
    ctx = contextvars.copy_context()

    def job() -> None:
        if fut.cancelled():  # timed out or cancelled while waiting for a thread: never start
            return
        try:
            value = ctx.run(op.fn, *op.args, **op.kwargs)
        except BaseException as exc:
            _deliver(loop, fut, None, exc)
        else:
            _deliver(loop, fut, value, None)

    _step_threads().submit(job)
    return await fut


def _deliver(loop: Any, fut: Any, value: Any, exc: BaseException | None) -> None:
    try:
        loop.call_soon_threadsafe(_settle, fut, value, exc)
    except RuntimeError:
        pass  # the loop is closed: nobody waits for this attempt any more


def _settle(fut: Any, value: Any, exc: BaseException | None) -> None:
    if fut.done():  # timed out or cancelled meanwhile: the result is ignored
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(value)


class _StepThreads:
    """A bounded pool of daemon threads (``concurrent.futures`` joins its threads at exit,
    and an attempt stuck past its timeout must not keep the process from exiting)."""

    def __init__(self, threads_max: int) -> None:
        self.threads_max = threads_max
        self._after_fork_in_child()
        reset_after_fork(self)

    def _after_fork_in_child(self) -> None:
        # A forked child has none of the parent's threads (nor their queued attempts): it
        # starts its own, with fresh locks (a parent thread may have held one at the fork).
        import queue

        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._lock = threading.Lock()
        self._threads = 0

    def submit(self, job: Callable[[], None]) -> None:
        """Run ``job`` on an idle thread, a new one below the limit, or the next free one."""
        self._jobs.put(job)
        if self._idle.acquire(blocking=False):
            return
        with self._lock:
            if self._threads < self.threads_max:
                self._threads += 1
                name = f"durably-step-{self._threads}"
                threading.Thread(target=self._work, name=name, daemon=True).start()

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            job()
            del job  # drop the finished attempt's references before waiting again
            self._idle.release()


_POOL: list[_StepThreads] = []


def _step_threads() -> _StepThreads:
    if not _POOL:
        # No lock (a child forked while another thread held one would wait forever): two
        # threads racing here may each build a pool, and all use the first (no thread runs
        # until a job is submitted, so the spare one costs nothing).
        _POOL.append(_StepThreads(SYNC_STEP_THREADS_MAX))
    return _POOL[0]


async def _wait_async(clock: Clock, op: Wait) -> None:
    import asyncio

    if isinstance(clock, SystemClock):
        await asyncio.sleep(op.seconds)
    else:
        clock.sleep(op.seconds)  # an injected clock: tests advance it instead of sleeping


class Context:
    """The handle a sync workflow uses for every recorded action."""

    __slots__ = ("_core", "_ex")

    def __init__(self, core: RunCore, executor: Executor) -> None:
        self._core = core
        self._ex = executor

    @property
    def run_id(self) -> str:
        """This run's id."""
        return self._core.run_id

    def step(self, name: str, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """Run ``fn(*args, **kwargs)`` as a recorded step, or return its recorded result.

        The step's identity is its position, ``name`` and the digest of its inputs; a
        mismatch on replay raises ``NonDeterminism``. A function with an
        ``idempotency_key`` parameter receives ``"<run_id>:<incarnation>:<position>"``, the
        same on every retry and after every crash; one with a ``fencing_token`` parameter
        receives the run's current fencing token. A final failure raises ``StepFailed``,
        live and on replay alike. A ``@durably.tool`` applies its kind (a destructive
        tool's approval request first, at its own position; see docs/tools.md).
        """
        tool = getattr(type(fn), "__durably_tool__", False)
        if tool:  # a @durably.tool: its kind applies (an approval first, effect options)
            tool_result: T = fn.record(self, name, args, kwargs)  # type: ignore[attr-defined]
            return tool_result
        result: T = drive_sync(self._ex, self._core.step(name, fn, args, kwargs))
        return result

    def step_stream(
        self,
        name: str,
        fn: Callable[..., Any],
        /,
        *args: Any,
        assemble: Callable[[list[Any]], Any] | None = None,
        replay: Callable[[Any], Any] | None = None,
        on_chunk: ChunkHook | None = None,
        **kwargs: Any,
    ) -> StepStream:
        """A streamed step: ``fn(*args, **kwargs)`` returns an iterable of chunks (a
        generator function, or a provider's stream), which reach the caller as they
        arrive; ``assemble(chunks)`` (default: the list of chunks) is recorded when they
        end, and a replay hands out ``replay(value)`` (default: the recorded list's items)
        without calling ``fn``. It takes one position and has a step's identity, options
        and key; see docs/api.md ("Streamed steps") for early stops and retries.
        """
        from .streaming import StepStream

        fn = _streamed_fn(self._core, name, fn)
        return StepStream(
            self._core, self._ex, name, fn, args, kwargs, assemble, replay, on_chunk, False
        )

    def wait_for_signal(
        self, name: str, timeout_s: float | None = None, default: Any = None
    ) -> Any:
        """Wait for signal ``name`` (``engine.signal(run_id, name, data)``) and return its
        data, or ``default`` once ``timeout_s`` seconds passed without one (None: no
        timeout).

        A recorded call (one position): replay returns what it returned, without waiting.
        Signals of one name are taken oldest first, each by one wait, and one sent before
        the wait is reached is kept for it. With none there, the run parks: it holds no
        process, thread or worker slot until a signal of ``name`` or the deadline (fixed
        when the wait is first reached, kept across crashes) wakes it.
        """
        return drive_sync(self._ex, self._core.wait_for_signal(name, timeout_s, default))

    def budget(self, tokens: int | None = None, cost_usd: float | None = None) -> None:
        """Limit the whole run's spend (what steps report with ``durably.usage``, summed
        over the run's ledger across generations) to ``tokens`` tokens and ``cost_usd``
        US dollars (None: no limit on that measure).

        Call it at the top of the workflow: it consumes no position, so every replay
        calls it again. The latest call wins (also over the workflow's ``budget=``
        option); it is stored for ``durably runs show``/``why`` when it differs from the
        stored one. Once the spend is more than a limit, the run's next recording call
        raises ``durably.BudgetExceeded`` (the step that crossed it keeps its result),
        latched: every later one raises it too, except a saga's compensations.
        """
        drive_sync(self._ex, self._core.set_budget(_budget(self._core, tokens, cost_usd)))

    def emit(self, kind: str, data: Any = None) -> None:
        """Add a user event (``{"kind": kind, "data": data}``, JSON data up to 64 KiB) to
        the run's event stream, at the current position. It consumes no position and
        costs no commit of its own (it rides with the next recorded step); an emit that
        replays after a crash is not stored twice."""
        self._core.emit(kind, data)

    def now(self) -> dt.datetime:
        """The current time (UTC), recorded: replay returns the same instant."""
        return self._core.now()

    def random(self) -> float:
        """A random float in [0, 1), recorded."""
        return self._core.random()

    def uuid(self) -> uuid.UUID:
        """A random UUID, recorded."""
        return self._core.uuid()

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` durably: the wake time (the recorded clock's now + seconds) is
        recorded at this position, and a timer not yet due parks the run: it gives back
        its process and lease (nothing is held while it waits) and is replayed from the
        top when due (by a worker, or by ``engine.run`` waiting in-process). Once reached,
        the recorded wake time wins: a crash, a restart or a deploy that changes the
        duration never starts a fresh sleep for this run. ``sleep(0)`` records and
        returns. Negative, NaN or infinite seconds block the run (``ConfigError``) when the
        timer is first reached; a timer reached before ignores its argument."""
        self._core.sleep(seconds)

    def sleep_until(self, when: dt.datetime) -> None:
        """Wait durably until ``when``, a timezone-aware datetime (a naive one is refused:
        it names no fixed instant); a time already past records and returns. Otherwise as
        :meth:`sleep`."""
        self._core.sleep_until(when)

    def request_approval(
        self,
        action: str,
        args: Any,
        *,
        timeout_s: float | None = None,
        on_timeout: str | Callable[[], Any] = "reject",
    ) -> Decision:
        """Ask a person to approve ``action`` with ``args`` (plain JSON data) and return
        their :class:`~durably.Decision`.

        A recorded call (one position, the request's ``request_id``): the request is
        bound to a digest, sha256 of the canonical JSON of ``[action, args]`` (see
        docs/api.md for the exact bytes), which ``engine.approve``/``engine.reject`` must
        name, so a decision is always about exactly this action. The run then parks: it
        holds no process, thread or worker slot until a decision (which wakes it at once)
        or ``timeout_s`` seconds (None: no expiry; the deadline is fixed when the request
        is first reached). On expiry: ``on_timeout="reject"`` returns a Decision with
        outcome ``"expired"``; ``"cancel"`` cancels the run (``durably.Cancelled`` is
        raised here and latched, and the run ends cancelled); a callable runs as the
        recorded step ``on_timeout:{action}`` at the next position, called with no
        arguments, and its result is the expired Decision's ``value``. The expiry is
        recorded, so a replay takes the same branch, once.
        """
        decision: Decision = drive_sync(
            self._ex, self._core.request_approval(action, args, timeout_s, on_timeout)
        )
        return decision

    def patched(self, change_id: str) -> bool:
        """Whether this run takes the code path of change ``change_id``: True for a run
        that reaches this point after the change shipped (a marker is recorded, taking a
        position), False for a run whose history was recorded by the code before it (it
        goes on the old path; nothing is consumed). Wrap an inserted or changed step in
        ``if ctx.patched("id"):`` so that in-flight runs replay."""
        return self._core.patched(change_id)

    def deprecate_patch(self, change_id: str) -> None:
        """Once no run on the old path remains, replace ``ctx.patched(change_id)`` with
        this: it consumes the marker runs recorded, records nothing, returns None."""
        self._core.deprecate_patch(change_id)

    def saga(self) -> Saga:
        """A saga for one block: ``with ctx.saga() as saga: saga.step(name, do, undo,
        *args, **kwargs)``. Each ``saga.step`` records ``do`` as an ordinary step and,
        once it succeeded, keeps ``undo`` as its compensation.

        When the block exits with an exception (``StepFailed``, ``Cancelled``,
        ``BudgetExceeded``, anything raised inside it), the compensations of the steps that
        succeeded run as recorded steps ``undo:{name}``, most recent first, after a
        ``compensate`` marker at the next position; then the exception goes on. A
        compensation that fails for good (after its own retries) does not stop the others;
        once all were tried, ``CompensationFailed`` is raised instead, naming both errors.
        Nothing is compensated when the block succeeds, when the run stops (a lost lease,
        parking, a store failure, a process exit: it resumes later and compensates then)
        or when the run is blocked. A saga nested in another that ends without
        compensating hands its steps to the outer one. ``ctx.saga()`` itself records
        nothing.
        """
        from .saga import Saga

        return Saga(self._core, self._ex)


class AsyncContext:
    """The handle an ``async def`` workflow uses: the same methods as :class:`Context`,
    awaitable, plus :meth:`gather` for parallel steps.

    Each method returns an awaitable that records when awaited, once. Used as a value
    without ``await`` (``ctx.now().hour``), it blocks the run with a message naming the
    missing ``await``; dropped without being awaited, it blocks the run at the next
    recording call or when the workflow returns.
    """

    __slots__ = ("_core", "_ex")

    def __init__(self, core: RunCore, executor: Executor) -> None:
        self._core = core
        self._ex = executor

    @property
    def run_id(self) -> str:
        """This run's id."""
        return self._core.run_id

    def step(
        self, name: str, fn: Callable[..., Awaitable[T] | T], /, *args: Any, **kwargs: Any
    ) -> Coroutine[Any, Any, T]:
        """Run ``fn`` as a recorded step (see :meth:`Context.step`); ``fn`` may be async.

        A sync ``fn`` runs in a thread of a bounded pool (``SYNC_STEP_THREADS_MAX``), so
        it neither blocks the event loop nor escapes its ``timeout_s``.
        """
        if getattr(type(fn), "__durably_tool__", False):  # a @durably.tool: see Context.step
            tool_call: Coroutine[Any, Any, T] = fn.record(self, name, args, kwargs)  # type: ignore[attr-defined]
            return tool_call
        return _StepCall(self._core, self._ex, name, fn, args, kwargs)

    def step_stream(
        self,
        name: str,
        fn: Callable[..., Any],
        /,
        *args: Any,
        assemble: Callable[[list[Any]], Any] | None = None,
        replay: Callable[[Any], Any] | None = None,
        on_chunk: ChunkHook | None = None,
        **kwargs: Any,
    ) -> AsyncStepStream:
        """:meth:`Context.step_stream` for async workflows: an async iterator (``async
        for chunk in ctx.step_stream(...)``, not awaited). ``fn`` may also be an async
        generator function (or return an async iterable); a sync iterable is pulled in a
        step thread, so the loop never blocks."""
        from .streaming import AsyncStepStream

        fn = _streamed_fn(self._core, name, fn)
        return AsyncStepStream(
            self._core, self._ex, name, fn, args, kwargs, assemble, replay, on_chunk, True
        )

    def wait_for_signal(
        self, name: str, timeout_s: float | None = None, default: Any = None
    ) -> Coroutine[Any, Any, Any]:
        """Wait for signal ``name`` and return its data, or ``default`` after
        ``timeout_s``: ``await ctx.wait_for_signal(name)`` (see
        :meth:`Context.wait_for_signal`)."""
        return _SignalWait(self._core, self._ex, name, timeout_s, default)

    def budget(
        self, tokens: int | None = None, cost_usd: float | None = None
    ) -> Coroutine[Any, Any, None]:
        """Limit the whole run's spend: ``await ctx.budget(tokens=..., cost_usd=...)``
        (see :meth:`Context.budget`). Dropped without ``await``, it blocks the run (a
        budget silently not applied would let the run spend without limit)."""
        core, ex = self._core, self._ex

        def apply() -> Coroutine[Any, Any, None]:
            return drive_async(ex, core.set_budget(_budget(core, tokens, cost_usd)))

        return _PlainCall(core, "budget", "ctx.budget(...)", apply)

    def emit(self, kind: str, data: Any = None) -> None:
        """Add a user event to the run's stream (see :meth:`Context.emit`). A plain call,
        not awaited: it does no I/O."""
        self._core.emit(kind, data)

    def now(self) -> Coroutine[Any, Any, dt.datetime]:
        """The current time (UTC), recorded: ``await ctx.now()``."""
        return _ValueCall(self._core, "now", self._core.now)

    def random(self) -> Coroutine[Any, Any, float]:
        """A random float in [0, 1), recorded: ``await ctx.random()``."""
        return _ValueCall(self._core, "random", self._core.random)

    def uuid(self) -> Coroutine[Any, Any, uuid.UUID]:
        """A random UUID, recorded: ``await ctx.uuid()``."""
        return _ValueCall(self._core, "uuid", self._core.uuid)

    def sleep(self, seconds: float) -> Coroutine[Any, Any, None]:
        """Wait ``seconds`` durably (see :meth:`Context.sleep`): ``await ctx.sleep(60)``.
        The run parks; it never holds the event loop, a thread or a worker slot while it
        waits."""
        return _SleepCall(self._core, self._ex, "sleep", lambda: self._core.sleep(seconds))

    def sleep_until(self, when: dt.datetime) -> Coroutine[Any, Any, None]:
        """Wait durably until the timezone-aware ``when`` (see
        :meth:`Context.sleep_until`): ``await ctx.sleep_until(when)``."""
        return _SleepCall(self._core, self._ex, "sleep_until", lambda: self._core.sleep_until(when))

    def request_approval(
        self,
        action: str,
        args: Any,
        *,
        timeout_s: float | None = None,
        on_timeout: str | Callable[[], Any] = "reject",
    ) -> Coroutine[Any, Any, Decision]:
        """Ask a person to approve ``action`` with ``args``:
        ``decision = await ctx.request_approval("refund", {"amount": 20})`` (see
        :meth:`Context.request_approval`). The run parks while it waits; an
        ``on_timeout`` callable may be sync or async."""
        return _ApprovalCall(self._core, self._ex, action, args, timeout_s, on_timeout)

    def patched(self, change_id: str) -> Coroutine[Any, Any, bool]:
        """Whether this run takes change ``change_id``'s path (see
        :meth:`Context.patched`): ``if await ctx.patched("change-id"):``. Without
        ``await`` (``if ctx.patched(...)``) it blocks the run instead of being always
        true."""
        core = self._core

        def check() -> Coroutine[Any, Any, bool]:
            return _at_once(core.patched(change_id))

        return _PlainCall(core, "patched", f"ctx.patched({change_id!r})", check)

    def deprecate_patch(self, change_id: str) -> Coroutine[Any, Any, None]:
        """Consume a recorded marker of ``change_id``, never record (see
        :meth:`Context.deprecate_patch`): ``await ctx.deprecate_patch("change-id")``."""
        core = self._core

        def consume() -> Coroutine[Any, Any, None]:
            core.deprecate_patch(change_id)
            return _at_once(None)

        return _PlainCall(core, "deprecate_patch", f"ctx.deprecate_patch({change_id!r})", consume)

    def saga(self) -> AsyncSaga:
        """A saga for one block: ``async with ctx.saga() as saga: await saga.step(name,
        do, undo, *args)`` (see :meth:`Context.saga`). ``saga.step(...)`` may be passed to
        ``ctx.gather``: the steps of all branches join the saga, and a failure undoes
        those that succeeded in reverse order of position (a replay reproduces it, where
        completion times would not). A saga opened inside a gather branch compensates
        when its own block raises; a branch cancelled because a sibling failed (an
        ``asyncio.CancelledError``) hands its steps to the enclosing saga instead, so put
        a saga around the gather to undo every branch's work. A branch already
        compensating is not cancelled: the gather waits for its compensations.
        """
        from .saga import AsyncSaga

        return AsyncSaga(self._core, self._ex)

    async def gather(self, *branches: Awaitable[Any], return_exceptions: bool = False) -> list[Any]:
        """Run branches concurrently with positions that do not depend on timing.

        The gather is a recorded command: it takes one position ``p`` and records there its
        arity and branch labels (a ``ctx.step``'s name, else the coroutine's qualname),
        checked on replay before any branch runs. Branch ``i`` numbers its own steps
        ``p.i.0, p.i.1, ...``, so steps finishing in any order replay exactly. Pass
        awaitables that have not started (``ctx.step(...)`` without ``await``, or calls of
        ``async def`` helpers). On the first failure the other branches are cancelled and
        the failure is raised (after a cancel or a crossed budget, which is latched, their
        steps in flight finish and are recorded first); with ``return_exceptions=True``
        failures are returned in place (a stop of the run itself, such as a lost lease, is
        still raised). A branch whose wait must park (a timer, a signal wait, an approval
        request) ends alone while the others go on until each finishes or parks too; the
        gather then parks the run once on all of their waits (the earliest wake time, any
        waited signal, any request decided), so waits in parallel branches run at the
        same time.
        """
        import asyncio  # imported here so that `import durably` stays fast

        try:
            labels = [_label(b) for b in branches]
            scope, pos = self._core.gather_begin(labels)
        except BaseException:
            _dispose(branches)  # the error is the story, not their "never awaited"
            raise
        failed = True
        core = self._core
        try:
            tasks = [
                asyncio.ensure_future(self._branch(f"{pos}.{i}.", b))
                for i, b in enumerate(branches)
            ]
            for i, t in enumerate(tasks):
                core.branch_tasks[f"{pos}.{i}."] = t
            try:
                results = await asyncio.gather(*tasks, return_exceptions=return_exceptions)
            except BaseException as exc:
                if not _local_park(core, exc):
                    await _unwind(core, tasks, exc)
                    raise
                # A branch parked on its own wait (not latched): the others go on live,
                # so waits in parallel branches run at the same time.
                results = await _after_park(core, tasks)
            parks = [r for r in results if _local_park(core, r)]
            for r in results:
                if isinstance(r, BaseException) and not isinstance(r, Exception):
                    if not any(r is p for p in parks):
                        raise r  # the run must stop (lease lost, in doubt, a process exit)
            if parks:
                if core.stopped is not None:
                    raise core.stopped.with_traceback(None)
                # One park for the whole gather, latched at the top level (or this
                # gather's own branch-local park when it is nested in a branch).
                raise core.park(combine_parks([p for p in parks if isinstance(p, Parked)]))
            failed = False
            return list(results)
        finally:
            core.gather_end(scope, pos, failed)
            _dispose(branches)

    async def _branch(self, prefix: str, aw: Awaitable[T]) -> T:
        # Runs inside its own task, whose context is a copy: the scope set here is seen
        # only by this branch's steps.
        try:
            scope = Scope(self._core, prefix)
        except BaseException:
            _dispose((aw,))  # never started: close it, or Python warns it was never awaited
            raise
        SCOPE.set(scope)
        core = self._core
        try:
            result: T = await aw
            if scope.stream is not None:  # a streamed step left open ends with its branch
                scope.stream.finish(f"the end of branch {prefix[:-1]}")
        except BaseException as exc:
            parked = core.branch_parks.get(prefix)
            if parked is not None and exc is not parked:
                # The branch parked, then its code caught the park (a bare except) and
                # raised something else: the park still decides, as a latched stop would.
                raise parked.with_traceback(None) from exc
            raise
        parked = core.branch_parks.get(prefix)
        if parked is not None:
            raise parked.with_traceback(None)  # it caught its own park and returned
        return result


class _Recording(Coroutine[Any, Any, T]):
    """What :class:`AsyncContext`'s recording methods return: a coroutine (so
    ``asyncio.create_task`` and ``asyncio.wait_for`` take it) that records when it first
    runs, and that refuses to be used as a value (see :class:`AsyncContext`)."""

    __slots__ = ("_core", "_inner", "_used")

    label: str
    """What a gather records for a branch that is this call."""

    def __init__(self, core: RunCore) -> None:
        self._core = core
        self._inner: Coroutine[Any, Any, T] | None = None
        self._used = False

    @abstractmethod
    def _call(self) -> str:
        """How the call reads in code, e.g. ``ctx.now()`` (for error messages)."""

    @abstractmethod
    def _run(self) -> Coroutine[Any, Any, T]:
        """The coroutine that records the call, created on first use."""

    def _start(self) -> Coroutine[Any, Any, T]:
        if self._inner is None:
            if self._used:
                raise RuntimeError(f"{self._call()} was already awaited or closed")
            self._used = True
            self._inner = self._run()
        return self._inner

    def __await__(self) -> Generator[Any, None, T]:
        return self._start().__await__()

    def send(self, value: Any, /) -> Any:
        """Coroutine protocol (a task drives the call with it)."""
        return self._start().send(value)

    def throw(self, typ: Any, val: Any = None, tb: Any = None, /) -> Any:
        """Coroutine protocol. Thrown into before it ran (a task cancelled before its
        first step), the call records nothing: the exception comes straight out."""
        if self._inner is None:
            self._used = True
            self._inner = _unstarted()
        if val is None and tb is None:
            return self._inner.throw(typ)
        return self._inner.throw(typ, val, tb)

    def close(self) -> None:
        """Coroutine protocol: a call closed before it ran records nothing."""
        self._used = True
        if self._inner is not None:
            self._inner.close()

    def __del__(self) -> None:
        if not self._used and self._core.dropped is None:
            call = self._call()
            self._core.dropped = (
                f"{call} was never awaited: in an async workflow it returns an awaitable that"
                f" records nothing until awaited; write `await {call}` (or pass it to"
                " ctx.gather). The run is blocked; fix the code, then resume it."
            )

    def __repr__(self) -> str:
        return f"<durably awaitable {self._call()}>"

    def _misused(self, *_: Any) -> NoReturn:
        self.close()
        call = self._call()
        raise self._core.poison(
            ConfigError(
                f"{call} was used as a value without await: in an async workflow it returns"
                f" an awaitable; write `value = await {call}`. The run is blocked; fix the"
                " code, then resume it."
            )
        )

    def __getattr__(self, name: str) -> NoReturn:
        if name.startswith(("_", "cr_", "gi_")):  # introspection (asyncio, inspect): no value use
            raise AttributeError(name)
        self._misused()

    __getitem__ = __iter__ = __len__ = __contains__ = __bool__ = _misused
    __str__ = __format__ = __int__ = __float__ = __index__ = __round__ = _misused
    __lt__ = __le__ = __gt__ = __ge__ = _misused
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _misused
    __truediv__ = __rtruediv__ = __floordiv__ = __mod__ = __neg__ = __abs__ = _misused


class _StepCall(_Recording[T]):
    __slots__ = ("_args", "_ex", "_fn", "_kwargs", "label")

    def __init__(
        self,
        core: RunCore,
        ex: Executor,
        name: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> None:
        # Every replayed step of an async workflow passes here: no super() call.
        self._core = core
        self._inner = None
        self._used = False
        self._ex = ex
        self.label = name
        self._fn = fn
        self._args = args
        self._kwargs = kwargs

    def __await__(self) -> Generator[Any, None, T]:
        # The plain `await ctx.step(...)`, without _start's bookkeeping for tasks.
        if self._used:
            raise RuntimeError(f"{self._call()} was already awaited or closed")
        self._used = True
        return self._run().__await__()

    def _call(self) -> str:
        return f"ctx.step({self.label!r}, ...)"

    def _run(self) -> Coroutine[Any, Any, T]:
        core = self._core
        if core.dropped is not None:
            raise core.poison(ConfigError(core.dropped))
        return drive_async(self._ex, core.step(self.label, self._fn, self._args, self._kwargs))


class _ApprovalCall(_Recording["Decision"]):
    __slots__ = ("_action", "_args", "_ex", "_on_timeout", "_timeout_s", "label")

    def __init__(
        self,
        core: RunCore,
        ex: Executor,
        action: str,
        args: Any,
        timeout_s: float | None,
        on_timeout: str | Callable[[], Any],
    ) -> None:
        super().__init__(core)
        self._ex = ex
        self._action = action
        self._args = args
        self._timeout_s = timeout_s
        self._on_timeout = on_timeout
        self.label = f"request_approval:{action}"

    def _call(self) -> str:
        return f"ctx.request_approval({self._action!r}, ...)"

    def _run(self) -> Coroutine[Any, Any, Decision]:
        core = self._core
        core.check_dropped()
        if _parked_before(core):
            return self._settled()
        gen = core.request_approval(self._action, self._args, self._timeout_s, self._on_timeout)
        return drive_async(self._ex, gen)

    async def _settled(self) -> Decision:
        await _siblings_first(self._core)
        gen = self._core.request_approval(
            self._action, self._args, self._timeout_s, self._on_timeout
        )
        return await drive_async(self._ex, gen)


class _ValueCall(_Recording[T]):
    __slots__ = ("_produce", "label")

    def __init__(self, core: RunCore, kind: str, produce: Callable[[], T]) -> None:
        super().__init__(core)
        self.label = f"durably.{kind}"
        self._produce = produce

    def _call(self) -> str:
        return f"ctx.{self.label[8:]}()"

    def _run(self) -> Coroutine[Any, Any, T]:
        self._core.check_dropped()
        return _at_once(self._produce())


class _PlainCall(_Recording[T]):
    """``ctx.budget``, ``ctx.patched`` and ``ctx.deprecate_patch`` of an async workflow:
    like the other calls, a dropped one blocks the run and one used as a value (``if
    ctx.patched(...)``, always true as a bare coroutine) is refused, instead of Python's
    easily missed "never awaited" warning while the call silently did nothing."""

    __slots__ = ("_call_text", "_do", "label")

    def __init__(
        self, core: RunCore, method: str, call: str, do: Callable[[], Coroutine[Any, Any, T]]
    ) -> None:
        super().__init__(core)
        # What a gather recorded for these when they were plain coroutines: kept, so a
        # run that passed one to ctx.gather replays unchanged.
        self.label = f"AsyncContext.{method}"
        self._call_text = call
        self._do = do

    def _call(self) -> str:
        return self._call_text

    def _run(self) -> Coroutine[Any, Any, T]:
        return self._do()


class _SignalWait(_Recording[Any]):
    __slots__ = ("_default", "_ex", "_name", "_timeout_s", "label")

    def __init__(
        self, core: RunCore, ex: Executor, name: str, timeout_s: float | None, default: Any
    ) -> None:
        super().__init__(core)
        self._ex = ex
        self._name = name
        self._timeout_s = timeout_s
        self._default = default
        self.label = f"wait_for_signal:{name}"

    def _call(self) -> str:
        return f"ctx.wait_for_signal({self._name!r})"

    def _run(self) -> Coroutine[Any, Any, Any]:
        core = self._core
        core.check_dropped()
        if _parked_before(core):
            return self._settled()
        return self._first()

    async def _first(self) -> Any:
        gen = self._core.wait_for_signal(self._name, self._timeout_s, self._default)
        try:
            return await drive_async(self._ex, gen)
        except Parked as parked:
            if self._core.stopped is parked:
                raise
            await _keep_branch_wait(self._ex, parked)

    async def _settled(self) -> Any:
        await _siblings_first(self._core)
        gen = self._core.wait_for_signal(self._name, self._timeout_s, self._default)
        return await drive_async(self._ex, gen)


class _SleepCall(_Recording[None]):
    """``ctx.sleep(...)`` / ``ctx.sleep_until(...)`` of an async workflow: records (and
    parks, when the timer is not due) when awaited, once."""

    __slots__ = ("_ex", "_method", "_timer", "label")

    def __init__(self, core: RunCore, ex: Executor, method: str, timer: Callable[[], None]) -> None:
        super().__init__(core)
        self._ex = ex
        self._method = method
        self.label = "durably.sleep"
        self._timer = timer

    def _call(self) -> str:
        return f"ctx.{self._method}(...)"

    def _run(self) -> Coroutine[Any, Any, None]:
        self._core.check_dropped()
        if _parked_before(self._core):
            return self._settled()
        try:
            self._timer()
        except Parked as parked:
            if self._core.stopped is parked:
                raise  # a top-level timer: the park (latched) writes its record
            return _keep_branch_wait(self._ex, parked)
        return _at_once(None)

    async def _settled(self) -> None:
        await _siblings_first(self._core)
        self._timer()


async def _keep_branch_wait(ex: Executor, parked: Parked) -> NoReturn:
    """A timer or signal wait in a gather branch parked only its branch: the siblings go
    on live, maybe for minutes (a model call), before the gather parks the run. Its
    ``waiting`` record (the wake time or deadline, recorded once) is written now, with
    whatever else is pending, so a crash meanwhile resumes the wait at its recorded time
    instead of arming it afresh; then the branch ends parked."""
    core = ex.core
    records = core.take_pending()
    if records:
        for pause in ex.write(Write(records, core.take_events())):
            await _wait_async(ex.clock, Wait(pause))
    raise parked


def _parked_before(core: RunCore) -> bool:
    """Whether the wait about to take the next position of a gather branch parked in an
    earlier attempt (its ``waiting`` record is there)."""
    scope = core.scope()
    if scope is core.root:
        return False
    rec = core.history.get(scope.peek())
    return rec is not None and rec.status == WAITING and rec.kind in (SLEEP, SIGNAL, APPROVAL)


async def _siblings_first(core: RunCore) -> None:
    """Before a gather branch's wait that parked in an earlier attempt looks at whether
    it is satisfied now: let the sibling branches (of every enclosing gather) replay what
    they recorded, until each has ended or gone live.

    The attempt that parked this wait may have ended its gather with a sibling's failure
    (the workflow caught it and went on): the replay must end the gather the same way,
    before this wait, satisfied meanwhile (its timer due, its signal sent), lets the
    branch go further than it did then, running steps it never ran or taking a signal a
    later wait was sent. Bounded by ``SETTLE_TURNS_MAX`` turns of the loop, so siblings
    that await each other outside durably never hang the run.
    """
    import asyncio

    prefix = core.scope().prefix
    core.went_live.add(prefix)  # siblings settling in turn need not wait for this one
    core.settling.add(prefix)
    try:
        for _ in range(SETTLE_TURNS_MAX):
            # Then in branch order, as the live attempt reached them: two waits for one
            # signal name take its signals first come, first served, on every replay.
            if _siblings_settled(core, prefix) and not any(
                _pos_key(p) < _pos_key(prefix) for p in core.settling
            ):
                return
            await asyncio.sleep(0)
    finally:
        # Once this returns, the caller's wait looks at the store before it yields to
        # the loop again, so a later sibling goes on only after it.
        core.settling.discard(prefix)


def _pos_key(prefix: str) -> tuple[int, ...]:
    return tuple(int(n) for n in prefix.split(".")[:-1])


def _siblings_settled(core: RunCore, prefix: str) -> bool:
    """Whether every sibling of ``prefix``'s branches (at every gather level) has ended
    or gone live."""
    parts = prefix.split(".")[:-1]  # "0.1.2.0." -> ["0", "1", "2", "0"]
    for k in range(2, len(parts) + 1, 2):
        mine = ".".join(parts[:k]) + "."
        gather = ".".join(parts[: k - 1]) + "."
        depth = mine.count(".")
        for branch, task in core.branch_tasks.items():
            if (
                branch != mine
                and branch.startswith(gather)
                and branch.count(".") == depth
                and (
                    _failed(core, task)
                    if task.done()
                    else not any(p.startswith(branch) for p in core.went_live)
                )
            ):
                # Running its replay still, or ended with a failure: its gather is about
                # to cancel this branch (unless it returns exceptions: then the bound
                # of turns lets this wait go on).
                return False
    return True


def _failed(core: RunCore, task: Any) -> bool:
    """Whether a branch's task ended by raising something other than its own park."""
    if task.cancelled():
        return True
    exc = task.exception()
    return exc is not None and not _local_park(core, exc)


def _local_park(core: RunCore, exc: object) -> bool:
    """Whether ``exc`` is a gather branch's own park (not the run-wide latched stop)."""
    return isinstance(exc, Parked) and exc is not core.stopped


async def _unwind(core: RunCore, tasks: list[Any], exc: BaseException) -> None:
    """A gather ends by raising ``exc``: settle its branches first.

    After a latched park the latch stops every sibling at its next recording call; a step
    already in flight finishes and is recorded first instead of being cancelled and run
    again on wake. After a halt (cancel, budget) likewise: a step in flight is recorded (a
    saga then undoes it too) instead of being abandoned with its effect done and
    unrecorded, and a sibling's compensation is not cut short. On any other failure the
    other branches are cancelled (except one running a saga's compensations).
    """
    import asyncio

    if not isinstance(exc, Parked) and not (isinstance(exc, Exception) and core.halted is not None):
        for t in tasks:
            if t not in COMPENSATING_TASKS:
                t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def _after_park(core: RunCore, tasks: list[Any]) -> list[Any]:
    """Wait for the branches still running after one parked on its own, and return every
    branch's result (its own park for those that parked). A branch that ends any other
    way than by returning or parking (a failure, a stop of the run) ends the gather as it
    would have without the park (:func:`_unwind`); the parked branches' ``waiting``
    records are pending and ride with whatever write ends the attempt."""
    import asyncio

    try:
        while True:
            # Branches that ended already count too (they may all have ended before this
            # ran): one that ended otherwise than by returning or parking ends the gather.
            for t in tasks:  # in branch order, as asyncio.gather would raise
                if t.done():
                    if t.cancelled():
                        raise asyncio.CancelledError
                    exc = t.exception()
                    if exc is not None and not _local_park(core, exc):
                        raise exc
            pending = [t for t in tasks if not t.done()]
            if not pending:
                break
            await asyncio.wait(pending, return_when=asyncio.FIRST_EXCEPTION)
    except BaseException as exc:
        await _unwind(core, tasks, exc)
        raise
    return [t.exception() or t.result() for t in tasks]


async def _at_once(value: T) -> T:
    return value


async def _unstarted() -> Any:
    return None


def _budget(core: RunCore, tokens: int | None, cost_usd: float | None) -> Budget:
    """``ctx.budget``'s arguments as a :class:`Budget`; a bad one is a bug in the code,
    so it blocks the run (like a bad step name) with a ConfigError naming it."""
    try:
        return Budget(tokens, cost_usd)
    except ConfigError as exc:
        raise core.poison(
            ConfigError(f"ctx.budget: {exc}. The run is blocked; fix the code, then resume it.")
        ) from None


def _branch_text(branch: object) -> str:
    """What was passed as a gather branch, named by its type (never its ``repr``: a value
    passed by mistake is the value, and this message leaves the process)."""
    if isinstance(branch, _Recording):
        return f"{branch.label!r}, a recording call already awaited"
    kind = type(branch)
    if inspect.iscoroutine(branch):
        return f"the coroutine {branch.__qualname__!r}, already started"
    article = "an" if kind.__name__[:1].lower() in "aeiou" else "a"
    return f"{article} {kind.__qualname__} ({kind.__module__}.{kind.__qualname__})"


def _label(branch: object) -> str:
    """What a gather records for a branch; refuses what cannot be a fresh branch."""
    if isinstance(branch, _Recording):
        if not branch._used:
            return branch.label
    elif inspect.iscoroutine(branch) and inspect.getcoroutinestate(branch) == "CORO_CREATED":
        return branch.__qualname__
    raise ConfigError(
        "ctx.gather takes coroutines that have not started, e.g."
        f" ctx.gather(ctx.step('a', fa), ctx.step('b', fb)); got {_branch_text(branch)}"
    )


def _dispose(branches: tuple[Awaitable[Any], ...]) -> None:
    """Close the branches a gather never started (cancelled or refused)."""
    for b in branches:
        if isinstance(b, _Recording):
            if b._inner is None:
                b.close()
        elif inspect.iscoroutine(b) and inspect.getcoroutinestate(b) == "CORO_CREATED":
            b.close()


def _streamed_fn(core: Any, name: str, fn: Any) -> Any:
    """What ``step_stream`` runs for ``fn``: ``fn`` itself, except that a
    ``@durably.tool`` that asks a person first is refused (the run ends blocked): a
    streamed step records the call alone, so its approval would be skipped and the tool
    would run unapproved."""
    if not getattr(type(fn), "__durably_tool__", False):
        return fn
    if fn.approval:
        raise core.poison(
            ConfigError(
                f"ctx.step_stream({name!r}, ...): the tool {fn.name!r} asks for an approval,"
                " which a streamed step does not request: call"
                f" ctx.request_approval({fn.name!r}, ...) before it and pass {fn.name}.fn,"
                " or declare the tool approval=False. The run is blocked; fix the code,"
                " then resume it."
            )
        )
    return fn
