"""What a workflow sees: :class:`Context` (sync) and :class:`AsyncContext` (async).

Both are thin facades over one :class:`~durably.core.RunCore`; the two drivers in
:mod:`durably.runtime.drive` execute the operations the core yields (call a function,
write records, wait). A workflow
must get every non-deterministic value through its context: the current time, random
numbers, UUIDs, model and tool calls.

``asyncio`` is imported only where async code runs: it costs tens of milliseconds, and
resume time (import to first live step) is a target.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from .budget import Budget
from .current import in_step, outside_step
from .errors import (
    ConfigError,
    clause,
)
from .features import budgets, emits, generations, signals, timers, versions
from .limits import SETTLE_TURNS_MAX as SETTLE_TURNS_MAX
from .limits import SYNC_STEP_THREADS_MAX as SYNC_STEP_THREADS_MAX
from .misuse import async_step_in_sync
from .replay import gathers, stepping, values
from .replay.kernel import (
    SCOPE,
    RunCore,
    Scope,
)
from .replay.park import Parked, combine_parks
from .runtime.awaitables import (
    STEP_TEXT,
    Recording,
    at_once,
    run_approval,
    run_signal,
    run_sleep,
    run_step,
    run_value,
)
from .runtime.branches import Branches, open_branches
from .runtime.drive import Executor, drive_async, drive_sync
from .runtime.settle import (
    after_park,
    local_park,
    unwind,
)

if TYPE_CHECKING:
    import uuid

    from .approvals import Decision
    from .saga import AsyncSaga, Saga
    from .streaming import AsyncStepStream, ChunkHook, DeltaFn, StepStream

T = TypeVar("T")


_CONTEXT: contextvars.ContextVar[Context | AsyncContext | None] = contextvars.ContextVar(
    "durably_current_context", default=None
)


def current_context() -> Context | AsyncContext | None:
    """The running workflow's :class:`~durably.Context` (sync workflow) or
    :class:`~durably.AsyncContext` (async workflow), else None.

    It is set in the workflow's body, in its ``ctx.gather`` branches and saga bodies,
    and is None outside a workflow and inside a running step (so a wrapper called from
    a step's function does not record a step of its own: the step is what is recorded).
    """
    return None if in_step() else _CONTEXT.get()


@contextlib.contextmanager
def _in_branch(ctx: Context | AsyncContext) -> Iterator[None]:
    """Inside ``with group.branch(i):``: the branch's task or thread sees ``ctx`` as
    :func:`current_context`. A thread a pool started without a copy of the context
    (``pool.submit(fn)`` rather than ``pool.submit(copy_context().run, fn)``) would
    otherwise see None, and a wrapped model client called there would pass through
    unrecorded, silently."""
    token = _CONTEXT.set(ctx)
    try:
        yield
    finally:
        try:
            _CONTEXT.reset(token)
        except ValueError:  # left in another context than entered: set it back
            _CONTEXT.set(None)


@contextlib.contextmanager
def workflow_body(ctx: Context | AsyncContext) -> Iterator[None]:
    """Around a workflow's body: it sees ``ctx`` as :func:`current_context` and no step
    (a workflow run from inside another's step is a body of its own)."""
    token = _CONTEXT.set(ctx)
    try:
        with outside_step():
            yield
    finally:
        _CONTEXT.reset(token)


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
        misuse = async_step_in_sync(fn)
        if misuse is not None:
            raise self._core.poison(misuse)  # the run blocks: a fix of the code resumes it
        result: T = drive_sync(self._ex, stepping.step(self._core, name, fn, args, kwargs))
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
        deltas: DeltaFn | None = None,
        **kwargs: Any,
    ) -> StepStream:
        """A streamed step: ``fn(*args, **kwargs)`` returns an iterable of chunks (a
        generator function, or a provider's stream), which reach the caller as they
        arrive; ``assemble(chunks)`` (default: the list of chunks) is recorded when they
        end, and a replay hands out ``replay(value)`` (default: the recorded list's items)
        without calling ``fn``. It takes one position and has a step's identity, options
        and key; see docs/api.md ("Streamed steps") for early stops and retries.
        ``deltas(chunk)`` (optional) turns each live chunk into ``model.delta`` events
        for followers of the run's stream (written at once, off the fsync path; each
        attempt opens with a ``model.restart``); see docs/events.md.
        """
        from .streaming import StepStream

        fn = _streamed_fn(self._core, name, fn)
        return StepStream(
            self._core, self._ex, name, fn, args, kwargs, assemble, replay, on_chunk, False, deltas
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
        return drive_sync(self._ex, signals.wait_for_signal(self._core, name, timeout_s, default))

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
        drive_sync(self._ex, budgets.set_budget(self._core, _budget(self._core, tokens, cost_usd)))

    def emit(self, kind: str, data: Any = None) -> None:
        """Add a user event (``{"kind": kind, "data": data}``, JSON data up to 64 KiB) to
        the run's event stream, at the current position. It consumes no position and
        costs no commit of its own (it rides with the next recorded step); an emit that
        replays after a crash is not stored twice."""
        with self._ex.hold():
            emits.emit(self._core, kind, data)

    def continue_as_new(self, *args: Any, **kwargs: Any) -> NoReturn:
        """End this run's generation and start the next with ``args``/``kwargs`` as the
        workflow's input (``return ctx.continue_as_new(state)`` reads well): the run id
        and incarnation stay, the history starts empty (positions from 0, keys
        ``{run_id}:{incarnation}:g{N}.{position}``), signals not consumed yet carry over,
        and ``engine.run`` returns the final generation's result. It never returns: it
        unwinds like a park, and the hand-over is one transaction. Allowed at the history
        limit (``durably.HistoryTooLarge``); call it at the top level, not in a branch.
        Earlier generations stay readable (``engine.history(run_id, generation=N)``,
        ``durably runs show RUN --generation N``) and are never replayed."""
        with self._ex.hold():
            generations.continue_as_new(self._core, args, kwargs)

    def now(self) -> dt.datetime:
        """The current time (UTC), recorded: replay returns the same instant."""
        with self._ex.hold():
            return values.now(self._core)

    def random(self) -> float:
        """A random float in [0, 1), recorded."""
        with self._ex.hold():
            return values.random(self._core)

    def uuid(self) -> uuid.UUID:
        """A random UUID, recorded."""
        with self._ex.hold():
            return values.uuid(self._core)

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` durably: the wake time (the recorded clock's now + seconds) is
        recorded at this position, and a timer not yet due parks the run: it gives back
        its process and lease (nothing is held while it waits) and is replayed from the
        top when due (by a worker, or by ``engine.run`` waiting in-process). Once reached,
        the recorded wake time wins: a crash, a restart or a deploy that changes the
        duration never starts a fresh sleep for this run. ``sleep(0)`` records and
        returns. Negative, NaN or infinite seconds block the run (``ConfigError``) when the
        timer is first reached; a timer reached before ignores its argument."""
        with self._ex.hold():
            timers.sleep(self._core, seconds)

    def sleep_until(self, when: dt.datetime) -> None:
        """Wait durably until ``when``, a timezone-aware datetime (a naive one is refused:
        it names no fixed instant); a time already past records and returns. Otherwise as
        :meth:`sleep`."""
        with self._ex.hold():
            timers.sleep_until(self._core, when)

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
        # The approvals room loads with the first request: a run that asks for none (and
        # a resume of it) never imports it (issue 28).
        from .features import approvals

        decision: Decision = drive_sync(
            self._ex, approvals.request_approval(self._core, action, args, timeout_s, on_timeout)
        )
        return decision

    def patched(self, change_id: str) -> bool:
        """Whether this run takes the code path of change ``change_id``: True for a run
        that reaches this point after the change shipped (a marker is recorded, taking a
        position), False for a run whose history was recorded by the code before it (it
        goes on the old path; nothing is consumed). Wrap an inserted or changed step in
        ``if ctx.patched("id"):`` so that in-flight runs replay."""
        with self._ex.hold():
            return versions.patched(self._core, change_id)

    def deprecate_patch(self, change_id: str) -> None:
        """Once no run on the old path remains, replace ``ctx.patched(change_id)`` with
        this: it consumes the marker runs recorded, records nothing, returns None."""
        with self._ex.hold():
            versions.deprecate_patch(self._core, change_id)

    def branches(self, labels: list[str]) -> Branches:
        """Reserve positions for calls that framework code runs concurrently itself (a
        thread pool running tool calls): takes the next position ``p`` and records there
        a gather marker of the labels (checked on replay before any branch runs), and
        returns a :class:`~durably.Branches`. The code of call ``i`` runs inside
        ``with group.branch(i):`` (in any thread) and its recording calls number
        ``p.i.0, p.i.1, ...``, whatever the threads' timing. See docs/api.md ("Ordered
        branches")."""
        return open_branches(self._core, self._ex, labels, False, lambda: _in_branch(self))

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
        core = self._core
        return Recording(core, name, STEP_TEXT, run_step, core, self._ex, name, fn, args, kwargs)

    def step_stream(
        self,
        name: str,
        fn: Callable[..., Any],
        /,
        *args: Any,
        assemble: Callable[[list[Any]], Any] | None = None,
        replay: Callable[[Any], Any] | None = None,
        on_chunk: ChunkHook | None = None,
        deltas: DeltaFn | None = None,
        **kwargs: Any,
    ) -> AsyncStepStream:
        """:meth:`Context.step_stream` for async workflows: an async iterator (``async
        for chunk in ctx.step_stream(...)``, not awaited). ``fn`` may also be an async
        generator function (or return an async iterable); a sync iterable is pulled in a
        step thread, so the loop never blocks."""
        from .streaming import AsyncStepStream

        fn = _streamed_fn(self._core, name, fn)
        return AsyncStepStream(
            self._core, self._ex, name, fn, args, kwargs, assemble, replay, on_chunk, True, deltas
        )

    def wait_for_signal(
        self, name: str, timeout_s: float | None = None, default: Any = None
    ) -> Coroutine[Any, Any, Any]:
        """Wait for signal ``name`` and return its data, or ``default`` after
        ``timeout_s``: ``await ctx.wait_for_signal(name)`` (see
        :meth:`Context.wait_for_signal`)."""
        core = self._core
        return Recording(
            core,
            f"wait_for_signal:{name}",
            f"ctx.wait_for_signal({name!r})",
            run_signal,
            *(core, self._ex, name, timeout_s, default),
        )

    def budget(
        self, tokens: int | None = None, cost_usd: float | None = None
    ) -> Coroutine[Any, Any, None]:
        """Limit the whole run's spend: ``await ctx.budget(tokens=..., cost_usd=...)``
        (see :meth:`Context.budget`). Dropped without ``await``, it blocks the run (a
        budget silently not applied would let the run spend without limit)."""
        core, ex = self._core, self._ex

        def apply() -> Coroutine[Any, Any, None]:
            return drive_async(ex, budgets.set_budget(core, _budget(core, tokens, cost_usd)))

        return Recording(core, "AsyncContext.budget", "ctx.budget(...)", apply)

    def emit(self, kind: str, data: Any = None) -> None:
        """Add a user event to the run's stream (see :meth:`Context.emit`). A plain call,
        not awaited: it does no I/O."""
        emits.emit(self._core, kind, data)

    def continue_as_new(self, *args: Any, **kwargs: Any) -> NoReturn:
        """End this generation and start the next with this input (see
        :meth:`Context.continue_as_new`). A plain call that raises at once, so
        ``return ctx.continue_as_new(state)`` and ``await ctx.continue_as_new(state)``
        both unwind (it does no I/O: the driver hands over)."""
        generations.continue_as_new(self._core, args, kwargs)

    def now(self) -> Coroutine[Any, Any, dt.datetime]:
        """The current time (UTC), recorded: ``await ctx.now()``."""
        return Recording(self._core, "durably.now", "ctx.now()", run_value, self._core, values.now)

    def random(self) -> Coroutine[Any, Any, float]:
        """A random float in [0, 1), recorded: ``await ctx.random()``."""
        core = self._core
        return Recording(core, "durably.random", "ctx.random()", run_value, core, values.random)

    def uuid(self) -> Coroutine[Any, Any, uuid.UUID]:
        """A random UUID, recorded: ``await ctx.uuid()``."""
        return Recording(
            self._core, "durably.uuid", "ctx.uuid()", run_value, self._core, values.uuid
        )

    def sleep(self, seconds: float) -> Coroutine[Any, Any, None]:
        """Wait ``seconds`` durably (see :meth:`Context.sleep`): ``await ctx.sleep(60)``.
        The run parks; it never holds the event loop, a thread or a worker slot while it
        waits."""
        core = self._core
        timer = lambda: timers.sleep(core, seconds)  # noqa: E731
        return Recording(core, "durably.sleep", "ctx.sleep(...)", run_sleep, core, self._ex, timer)

    def sleep_until(self, when: dt.datetime) -> Coroutine[Any, Any, None]:
        """Wait durably until the timezone-aware ``when`` (see
        :meth:`Context.sleep_until`): ``await ctx.sleep_until(when)``."""
        core = self._core
        timer = lambda: timers.sleep_until(core, when)  # noqa: E731
        return Recording(
            core, "durably.sleep", "ctx.sleep_until(...)", run_sleep, core, self._ex, timer
        )

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
        core = self._core
        return Recording(
            core,
            f"request_approval:{action}",
            f"ctx.request_approval({action!r}, ...)",
            run_approval,
            *(core, self._ex, action, args, timeout_s, on_timeout),
        )

    def patched(self, change_id: str) -> Coroutine[Any, Any, bool]:
        """Whether this run takes change ``change_id``'s path (see
        :meth:`Context.patched`): ``if await ctx.patched("change-id"):``. Without
        ``await`` (``if ctx.patched(...)``) it blocks the run instead of being always
        true."""
        core = self._core

        def check() -> Coroutine[Any, Any, bool]:
            return at_once(versions.patched(core, change_id))

        # A gather records these under the label they had as plain coroutines: a run
        # that passed one to ctx.gather replays unchanged.
        return Recording(core, "AsyncContext.patched", f"ctx.patched({change_id!r})", check)

    def deprecate_patch(self, change_id: str) -> Coroutine[Any, Any, None]:
        """Consume a recorded marker of ``change_id``, never record (see
        :meth:`Context.deprecate_patch`): ``await ctx.deprecate_patch("change-id")``."""
        core = self._core

        def consume() -> Coroutine[Any, Any, None]:
            versions.deprecate_patch(core, change_id)
            return at_once(None)

        text = f"ctx.deprecate_patch({change_id!r})"
        return Recording(core, "AsyncContext.deprecate_patch", text, consume)

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

    def branches(self, labels: list[str]) -> Branches:
        """Reserve positions for calls that framework code runs concurrently itself
        (asyncio tasks outside :meth:`gather`): takes the next position ``p`` and records
        there a gather marker of the labels (checked on replay before any branch runs),
        and returns a :class:`~durably.Branches` (not awaited). The code of call ``i``
        runs inside ``with group.branch(i):`` in its task, and its recording calls number
        ``p.i.0, p.i.1, ...``, whatever order the tasks finish in. See docs/api.md
        ("Ordered branches")."""
        return open_branches(self._core, self._ex, labels, True, lambda: _in_branch(self))

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
            scope, pos = gathers.gather_begin(self._core, labels)
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
                self._ex.gathers.tasks[f"{pos}.{i}."] = t
            try:
                results = await asyncio.gather(*tasks, return_exceptions=return_exceptions)
            except BaseException as exc:
                if not local_park(core, exc):
                    await unwind(core, tasks, exc, self._ex.gathers)
                    raise
                # A branch parked on its own wait (not latched): the others go on live,
                # so waits in parallel branches run at the same time.
                results = await after_park(core, tasks, self._ex.gathers)
            parks = [r for r in results if local_park(core, r)]
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
            gathers.gather_end(core, scope, pos, failed)
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
            parked = core.gathers.parks.get(prefix)
            if parked is not None and exc is not parked:
                # The branch parked, then its code caught the park (a bare except) and
                # raised something else: the park still decides, as a latched stop would.
                raise parked.with_traceback(None) from exc
            raise
        parked = core.gathers.parks.get(prefix)
        if parked is not None:
            raise parked.with_traceback(None)  # it caught its own park and returned
        return result


def _budget(core: RunCore, tokens: int | None, cost_usd: float | None) -> Budget:
    """``ctx.budget``'s arguments as a :class:`Budget`; a bad one is a bug in the code,
    so it blocks the run (like a bad step name) with a ConfigError naming it."""
    try:
        return Budget(tokens, cost_usd)
    except ConfigError as exc:
        raise core.poison(
            ConfigError(
                f"ctx.budget: {clause(exc)}. The run is blocked; fix the code, then resume it."
            )
        ) from None


def _branch_text(branch: object) -> str:
    """What was passed as a gather branch, named by its type (never its ``repr``: a value
    passed by mistake is the value, and this message leaves the process)."""
    import inspect  # here and below: gathers only, so a plain resume never imports it

    if isinstance(branch, Recording):
        return f"{branch.label!r}, a recording call already awaited"
    kind = type(branch)
    if inspect.iscoroutine(branch):
        return f"the coroutine {branch.__qualname__!r}, already started"
    article = "an" if kind.__name__[:1].lower() in "aeiou" else "a"
    return f"{article} {kind.__qualname__} ({kind.__module__}.{kind.__qualname__})"


def _label(branch: object) -> str:
    """What a gather records for a branch; refuses what cannot be a fresh branch."""
    import inspect

    if isinstance(branch, Recording):
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
    import inspect

    for b in branches:
        if isinstance(b, Recording):
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
