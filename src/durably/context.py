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
from collections.abc import Awaitable, Callable, Coroutine, Generator, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from .clock import Clock, SystemClock
from .core import SCOPE, Call, Op, Outcome, RunCore, Scope, Wait, Write
from .errors import ConfigError, LeaseLost, StepTimeout, StoreError, StoreFailed
from .steps import USAGE, Usage
from .store import retry
from .store.base import Store

if TYPE_CHECKING:
    import uuid

T = TypeVar("T")


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

        A store error never reaches the workflow as an ordinary exception: a refused
        append (another owner) or a store that still fails after the retries latches a stop
        in the core (``LeaseLost`` / ``StoreFailed``, both BaseExceptions), so every later
        recording call stops too, whatever the workflow catches.
        """
        core = self.core
        with recording(core):
            yield from retry.attempts(
                lambda: self.store.append(core.run_id, core.token, op.records, op.events),
                self.store_retry_s,
            )


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
        if isinstance(op, Call):
            reply = _call_sync(op)
        elif isinstance(op, Write):
            for pause in ex.write(op):
                ex.clock.sleep(pause)
            reply = None
        else:
            ex.clock.sleep(op.seconds)
            ex.refresh_lease()
            reply = None


async def drive_async(ex: Executor, gen: Generator[Op, Any, T]) -> T:
    """Run a core generator to completion on the running event loop."""
    reply: Any = None
    while True:
        try:
            op = gen.send(reply)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        if isinstance(op, Call):
            reply = await _call_async(op)
        elif isinstance(op, Write):
            # One short fenced commit; a thread hop would cost more than it saves.
            for pause in ex.write(op):
                await _wait_async(ex.clock, Wait(pause))
            reply = None
        else:
            await _wait_async(ex.clock, op)
            ex.refresh_lease()
            reply = None


def _call_sync(op: Call) -> Outcome:
    box = Usage()
    token = USAGE.set(box)
    try:
        if op.is_async:
            raise ConfigError(
                f"{op.fn!r} is an async function: call it from an async workflow"
                " (async def, await ctx.step(...)), or pass a sync function"
            )
        if op.timeout_s is None:
            value = op.fn(*op.args, **op.kwargs)
        else:
            value = _call_with_timeout(op)
        if inspect.isawaitable(value):
            if inspect.iscoroutine(value):
                value.close()
            raise ConfigError(f"{op.fn!r} returned an awaitable: use an async workflow")
        return Outcome(value, None, box)
    except Exception as exc:
        return Outcome(None, exc, box)
    finally:
        USAGE.reset(token)


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
        name = getattr(op.fn, "__name__", op.fn)
        raise StepTimeout(f"{name!r} ran past timeout_s={op.timeout_s}; the attempt failed")
    if error:
        raise error[0]
    return result[0]


async def _call_async(op: Call) -> Outcome:
    import asyncio

    box = Usage()
    token = USAGE.set(box)
    try:
        value = op.fn(*op.args, **op.kwargs)
        if inspect.isawaitable(value):
            if op.timeout_s is not None:
                try:
                    value = await asyncio.wait_for(value, op.timeout_s)
                except TimeoutError:
                    raise StepTimeout(
                        f"{getattr(op.fn, '__name__', op.fn)!r} ran past timeout_s={op.timeout_s}"
                    ) from None
            else:
                value = await value
        return Outcome(value, None, box)
    except Exception as exc:
        return Outcome(None, exc, box)
    finally:
        USAGE.reset(token)


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
        live and on replay alike.
        """
        result: T = drive_sync(self._ex, self._core.step(name, fn, args, kwargs))
        return result

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


class AsyncContext:
    """The handle an ``async def`` workflow uses: the same methods as :class:`Context`,
    awaitable, plus :meth:`gather` for parallel steps."""

    __slots__ = ("_core", "_ex")

    def __init__(self, core: RunCore, executor: Executor) -> None:
        self._core = core
        self._ex = executor

    @property
    def run_id(self) -> str:
        """This run's id."""
        return self._core.run_id

    async def step(
        self, name: str, fn: Callable[..., Awaitable[T] | T], /, *args: Any, **kwargs: Any
    ) -> T:
        """Run ``fn`` as a recorded step (see :meth:`Context.step`); ``fn`` may be async."""
        result: T = await drive_async(self._ex, self._core.step(name, fn, args, kwargs))
        return result

    def emit(self, kind: str, data: Any = None) -> None:
        """Add a user event to the run's stream (see :meth:`Context.emit`). A plain call,
        not awaited: it does no I/O."""
        self._core.emit(kind, data)

    async def now(self) -> dt.datetime:
        """The current time (UTC), recorded."""
        return self._core.now()

    async def random(self) -> float:
        """A random float in [0, 1), recorded."""
        return self._core.random()

    async def uuid(self) -> uuid.UUID:
        """A random UUID, recorded."""
        return self._core.uuid()

    async def gather(
        self, *branches: Coroutine[Any, Any, Any], return_exceptions: bool = False
    ) -> list[Any]:
        """Run coroutines concurrently with positions that do not depend on timing.

        The gather takes one position ``p``; branch ``i`` numbers its own steps
        ``p.i.0, p.i.1, ...``, so steps finishing in any order replay exactly. Pass
        coroutines that have not started (``ctx.step(...)`` without ``await``, or calls of
        ``async def`` helpers). On the first failure the other branches are cancelled
        (unless ``return_exceptions``) and the failure is raised.
        """
        import asyncio  # imported here so that `import durably` stays fast

        self._core.guard()
        for b in branches:
            if not inspect.iscoroutine(b):
                raise ConfigError(
                    f"ctx.gather takes coroutines that have not started, e.g."
                    f" ctx.gather(ctx.step('a', fa), ctx.step('b', fb)); got {b!r}"
                )
        pos = self._core.take()
        tasks = [
            asyncio.ensure_future(self._branch(f"{pos}.{i}.", b)) for i, b in enumerate(branches)
        ]
        if return_exceptions:
            return list(await asyncio.gather(*tasks, return_exceptions=True))
        try:
            return list(await asyncio.gather(*tasks))
        except BaseException:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise

    async def _branch(self, prefix: str, coro: Coroutine[Any, Any, T]) -> T:
        # Runs inside its own task, whose context is a copy: the scope set here is seen
        # only by this branch's steps.
        try:
            scope = Scope(self._core, prefix)
        except BaseException:
            coro.close()  # never started: close it, or Python warns it was never awaited
            raise
        SCOPE.set(scope)
        result: T = await coro
        return result
