"""The one sync and the one async driver: they carry out the operations the replay kernel
yields (call a function, write records, wait, take a signal, read a decision, charge
spend) against a store and a clock, and run sync steps on a bounded thread pool.

``asyncio`` is imported only where async code runs: it costs tens of milliseconds, and
resume time (import to first live step) is a target.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import inspect
import threading
import weakref
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from .._fork import reset_after_fork
from ..clock import Clock, SystemClock
from ..current import inside_step
from ..errors import (
    Cancelled,
    ConfigError,
    LeaseLost,
    StepTimeout,
    StoreError,
    StoreFailed,
)
from ..limits import SYNC_STEP_THREADS_MAX as SYNC_STEP_THREADS_MAX
from ..replay.kernel import RunCore, cancelled_error
from ..replay.ops import (
    Call,
    Charge,
    Op,
    Outcome,
    ReadDecision,
    ReadSpend,
    SetBudget,
    TakeSignal,
    Wait,
    Write,
)
from ..steps import USAGE, Usage, fn_text
from ..store import retry
from ..store.base import Store
from .joincommit import joined
from .lock import RunLock

if TYPE_CHECKING:
    import asyncio

    from ..approvals import ApprovalRow

T = TypeVar("T")

# The asyncio tasks running a saga's exit (its compensations) right now: a gather whose
# branch failed does not cancel such a sibling, whose undo steps would stop half-way
# (the saga's marker recorded, its steps neither undone nor reported), but waits for it.
COMPENSATING_TASKS: weakref.WeakSet[Any] = weakref.WeakSet()


@dataclass(slots=True)
class GatherTasks:
    """The asyncio tasks of an attempt's ``ctx.gather`` branches, by branch prefix
    (``"4.0."``), and the prefixes of the branch waits settling now (see
    :func:`durably.runtime.settle.siblings_first`)."""

    tasks: dict[str, asyncio.Task[Any]] = field(default_factory=dict)
    settling: set[str] = field(default_factory=set)


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
        # This attempt's async gather branches (their tasks, and the ones settling now):
        # the driver's state, never the kernel's.
        self.gathers = GatherTasks()
        # Serializes telling the core the spend after a late charge (see _LateCharges),
        # made from the threads of attempts that ran past their timeout.
        self.late_lock = threading.Lock()
        # Made by the first ctx.branches group of a sync run (its branches may record
        # from several threads): held while the kernel's state changes (see RunLock).
        self.lock: RunLock | None = None

    def hold(self) -> contextlib.AbstractContextManager[None]:
        """Around a call into the kernel from a sync facade: the run's lock once its
        branches may record from several threads, else nothing."""
        lock = self.lock
        return _UNLOCKED if lock is None else lock

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
            core.lease_renewed(asked_at + self.lease_s)
        else:
            core.token_refused(asked_at)

    def write(self, op: Write, cancel: bool | None = None) -> Generator[float, None, None]:
        """Append records, fenced by the core's token; yields the pauses to wait between
        attempts after a transient store error.

        When the append reports a cancel asked for, the core is asked to halt the
        workflow with ``Cancelled`` at its next position that would go live.

        A store error never reaches the workflow as an ordinary exception: a refused
        append (another owner) or a store that still fails after the retries latches a stop
        in the core (``LeaseLost`` / ``StoreFailed``, both BaseExceptions), so every later
        recording call stops too, whatever the workflow catches.

        ``cancel`` given: the append is written already (an async run's, in a shared
        commit: :mod:`.joincommit`) and this is its cancel flag.
        """
        core = self.core
        core.count_written(op.records)  # the history limits' count: no query of its own
        with recording(core):
            if cancel is None:
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


class recording:
    """Around a store call that records for ``core``: a refused write (``LeaseLost``, its
    reason the driver's own deadline when that had passed) or a ``StoreError`` is latched
    in the core as its stop signal and raised as that signal (a BaseException), never as
    an ordinary exception the workflow could catch. A class, not a generator: it is
    around every step's write (a generator-based one costs a step about 2 us)."""

    __slots__ = ("core",)

    def __init__(self, core: RunCore) -> None:
        self.core = core

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> None:
        if exc is None:
            return
        core = self.core
        if isinstance(exc, LeaseLost):
            if exc.reason is not None:
                core.latch(exc)
                return  # raised as it is
            raise core.token_refused() from None
        if isinstance(exc, StoreError):
            stop = StoreFailed(exc)
            core.latch(stop)
            raise stop from exc


_UNLOCKED = contextlib.nullcontext()


def drive_sync(ex: Executor, gen: Generator[Op, Any, T]) -> T:
    """Run a core generator to completion in this thread.

    Once branches may record from other threads (``ex.lock``), the kernel's state and
    the store are touched under the run's lock, which is let go while a step's function
    runs or a wait passes, so the branches' calls run at the same time."""
    lock = ex.lock
    with lock if lock is not None else _UNLOCKED:
        reply: Any = None
        while True:
            try:
                op = gen.send(reply)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            try:
                reply = op_sync_held(ex, op)
            except BaseException:
                gen.close()  # the core's cleanup (its scope is no longer busy) runs now
                raise


def op_sync_held(ex: Executor, op: Op) -> Any:
    """:func:`op_sync` for a caller inside ``ex.hold()``: the run's lock (when branches
    may record from other threads) is let go while a step's function runs or a wait
    passes."""
    lock = ex.lock
    if lock is not None and isinstance(op, Call | Wait):
        with lock.released():
            return op_sync(ex, op)
    return op_sync(ex, op)


def op_sync(ex: Executor, op: Op) -> Any:
    """Carry out one operation in this thread; returns the reply for the core."""
    if isinstance(op, Call):
        return _call_sync(ex, op)
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
        return await _call_async(ex, op)
    if isinstance(op, Write):
        # One short fenced commit; a thread hop would cost more than it saves. With other
        # async runs on this loop and store, it joins their shared commit.
        cancel = None
        shared = joined(ex.store)
        if shared is not None:
            core = ex.core
            with recording(core):
                try:
                    cancel = await shared.append(core.run_id, core.token, op.records, op.events)
                except StoreError as exc:
                    if not exc.transient:
                        raise
                    # A busy journal, a dropped connection: retried alone, as any write.
        for pause in ex.write(op, cancel):
            await wait_async(ex.clock, Wait(pause))
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
            await wait_async(ex.clock, Wait(pause))
    await wait_async(ex.clock, op)
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


def _call_sync(ex: Executor, op: Call) -> Outcome:
    box = Usage()
    token = USAGE.set(box)
    try:
        with inside_step(op.info):
            out = _run_sync(op, box)
    finally:
        USAGE.reset(token)
    if isinstance(out.error, StepTimeout):
        out.usage = _late_usage(ex, op, box)
    return out


def _run_sync(op: Call, box: Usage) -> Outcome:
    try:
        if op.is_async:
            misuse = ConfigError(
                f"{fn_text(op.fn)!r} is an async function: call it from an async workflow"
                " (async def, await ctx.step(...)), or pass a sync function. The run is"
                " blocked; fix the code, then resume it."
            )
            return Outcome(None, misuse, box, misuse)
        if op.timeout_s is None:
            value = op.fn(*op.args, **op.kwargs)
        else:
            value = _call_with_timeout(op)
        if type(value) not in _NEVER_AWAITABLE and inspect.isawaitable(value):
            # Never awaited here, so what it stands for did not happen: recording it (or
            # failing the step, which a workflow may catch and go on from) would be wrong.
            if inspect.iscoroutine(value):
                value.close()
            misuse = ConfigError(
                f"{fn_text(op.fn)!r} returned an awaitable ({type(value).__name__}), which a"
                " sync workflow cannot await: make the workflow async (async def, await"
                " ctx.step(...)), or have the step function return its result. The run is"
                " blocked; fix the code, then resume it."
            )
            return Outcome(None, misuse, box, misuse)
        return Outcome(value, None, box)
    except Exception as exc:
        return Outcome(None, exc, box)


# The plain types most steps return: none is awaitable, so inspect.isawaitable (an ABC
# check, a few hundred instructions for a dict) is skipped for them.
_NEVER_AWAITABLE = frozenset({dict, list, str, int, float, bool, type(None), tuple, bytes})


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


async def _call_async(ex: Executor, op: Call) -> Outcome:
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
                    # A sync step's thread runs on: what it reports from now on is
                    # charged as it arrives.
                    stop = StepTimeout(
                        f"{fn_text(op.fn)!r} ran past timeout_s={op.timeout_s}; the attempt failed"
                    )
                    return Outcome(None, stop, _late_usage(ex, op, box, on_loop=True))
        return Outcome(value, None, box)
    except Exception as exc:
        return Outcome(None, exc, box)
    except asyncio.CancelledError:
        # Cancelled (a gather branch whose sibling failed, the run stopping): the core
        # charges nothing for this call, so what it reported so far is charged here, and
        # a sync step's thread, which runs on, is billed as it reports.
        _late_usage(ex, op, box, cancelled=True, on_loop=True)
        raise
    finally:
        USAGE.reset(token)


def _late_usage(
    ex: Executor, op: Call, box: Usage, cancelled: bool = False, on_loop: bool = False
) -> Usage:
    """An attempt timed out (or was cancelled) but its code runs on (Python cannot stop
    a thread), and a model call it made is billed when it returns: returns what it
    reported so far, for the core to charge with the attempt, and makes every later
    report reach the ledger as it arrives, as its own entry, from the attempt's thread
    (see :class:`_LateCharges`). A ``cancelled`` call gets no outcome, so the core
    charges nothing for it: what it reported so far is charged here too. ``on_loop``:
    called on the event loop, whose thread must not wait out a failing store's retries
    (the charge made here goes to a step thread)."""
    so_far = dataclasses.replace(box, late=None)
    if op.spend_call is None or op.info is None:
        return so_far  # a call whose usage is not charged (closing a stream)
    base = Usage() if cancelled else so_far
    late = _LateCharges(ex, op.info.position, op.info.attempt, op.spend_call, base)
    box.late = late
    # What was reported between the copy and setting the hook (or all of it).
    if on_loop:
        _step_threads().submit(lambda: late(box))
    else:
        late(box)
    return so_far


class _LateCharges:
    """Charges what one timed-out attempt reports after its timeout: each report's new
    spend is one ledger entry (``a2:late1``, ``a2:late2``, ...), the run's spend after it
    goes to the core (its next position that goes live checks the budget). The ledger is
    not fenced: the call happened whoever owns the run by then."""

    def __init__(self, ex: Executor, pos: str, attempt: int, call: str, charged: Usage) -> None:
        self.ex, self.pos, self.attempt, self.call = ex, pos, attempt, call
        self.charged = charged
        self.entries = 0
        self.lock = threading.Lock()

    def __call__(self, box: Usage) -> None:
        # One report at a time, its entry committed before the next is counted: a
        # report that returns has reached the ledger, with everything before it.
        with self.lock:
            was = self.charged
            new = Usage(
                tokens=box.tokens - was.tokens,
                cost_usd=box.cost_usd - was.cost_usd,
                reported=True,
                input_tokens=box.input_tokens - was.input_tokens,
                output_tokens=box.output_tokens - was.output_tokens,
                split=box.split,
            )
            if not box.reported or (new.tokens, new.cost_usd) == (0, 0):
                return
            self.charged = dataclasses.replace(box, late=None)
            self.entries += 1
            ex = self.ex
            entry = ex.core.spend_entry(
                self.pos, f"{self.call}:late{self.entries}", self.attempt, new
            )
            try:
                spend = retry_sync(
                    retry.attempts(
                        lambda: ex.store.record_spend(ex.core.run_id, entry), ex.store_retry_s
                    ),
                    ex.clock,
                )
            except Exception:
                # The store stays down, or the engine was closed meanwhile: nobody is left
                # to tell, and the given-up attempt's own code must not fail for durably.
                return
        with ex.late_lock:  # the core keeps the later of two readings told at once
            ex.core.spend_arrived(spend)


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


async def wait_async(clock: Clock, op: Wait) -> None:
    """Wait ``op.seconds`` on ``clock``: asleep on the event loop on the real clock, an
    injected clock's own sleep otherwise (tests advance it instead of sleeping)."""
    import asyncio

    if isinstance(clock, SystemClock):
        await asyncio.sleep(op.seconds)
    else:
        clock.sleep(op.seconds)  # an injected clock: tests advance it instead of sleeping
