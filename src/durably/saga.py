"""Sagas: steps that carry a compensation, undone in reverse order when the block fails.

``with ctx.saga() as saga: saga.step(name, do, undo, *args, **kwargs)`` records ``do`` as
the ordinary step ``name`` and, once it succeeded, remembers ``undo``. When the block exits
with an ordinary exception (``StepFailed``, ``Cancelled``, ``BudgetExceeded``, anything the
workflow raised inside it), the saga records a ``compensate`` marker at the next position
and runs each ``undo`` as the recorded step ``undo:{name}``, most recent first, each at its
own position (so under its own idempotency key); then the exception goes on. Because they
are recorded steps, a crash during compensation resumes it: the failure replays, the
finished compensations replay, the rest run.

Never compensated: a block that succeeded, a BaseException (a lost lease, parking, a store
failure, an injected crash or process exit: the run stops and resumes later, where the
same failure replays and compensation happens then), and a run that is blocked
(``NonDeterminism``, a ``ConfigError`` in the code): the code must be fixed first.

One implementation (:class:`SagaCore`, generators of the core's operations) serves the
sync :class:`Saga` and the async :class:`AsyncSaga`.
"""

from __future__ import annotations

import contextvars
import inspect
from collections.abc import Awaitable, Callable, Coroutine, Generator
from dataclasses import dataclass
from typing import Any, TypeVar

from . import codec
from .errors import CompensationFailed, ConfigError, SerializationError, StepFailed
from .features import sagas
from .history import check_name, describe_error, position_key
from .misuse import async_step_in_sync
from .replay import stepping
from .replay.kernel import RunCore, type_name
from .replay.ops import Op
from .runtime.awaitables import Recording
from .runtime.drive import COMPENSATING_TASKS, Executor, drive_async, drive_sync
from .steps import fn_text, signature_of

T = TypeVar("T")

UNDO_PREFIX = "undo:"
"""A compensation of the saga step ``name`` is recorded as the step ``undo:{name}``."""

# The innermost open saga of the code running now (a gather branch sees its parent's): a
# saga that ends without compensating hands what it did to it (see SagaCore.exit).
_OPEN: contextvars.ContextVar[SagaCore | None] = contextvars.ContextVar(
    "durably_saga", default=None
)


@dataclass(frozen=True, slots=True)
class Done:
    """A saga step that succeeded: what its compensation needs."""

    position: str
    name: str
    undo: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    result: Any
    takes_result: bool

    def undo_kwargs(self) -> dict[str, Any]:
        """``do``'s keyword arguments, plus ``result=`` when ``undo`` takes one."""
        if not self.takes_result:
            return self.kwargs
        return {**self.kwargs, "result": self.result}


class SagaCore:
    """The state of one saga of one run: which steps succeeded, and whether its block is
    open. A saga is used once: ``new`` → ``open`` (its block runs) → ``closed``."""

    __slots__ = ("core", "done", "parent", "state")

    def __init__(self, core: RunCore) -> None:
        self.core = core
        self.done: list[Done] = []
        self.parent: SagaCore | None = None
        self.state = "new"

    def open(self) -> None:
        """The block begins (``__enter__``)."""
        if self.state != "new":
            raise self.core.poison(
                ConfigError(
                    "a saga was entered twice: each `with ctx.saga() as saga:` block needs a"
                    " saga of its own (call ctx.saga() again), so what it compensates is"
                    " exactly what ran in that block. The run is blocked; fix the code, then"
                    " resume it."
                )
            )
        self.state = "open"
        self.core.open_sagas += 1
        outer = _OPEN.get()
        self.parent = outer if outer is not None and outer.core is self.core else None
        _OPEN.set(self)

    def step(
        self,
        name: Any,
        do: Any,
        undo: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Generator[Op, Any, Any]:
        """Record ``do`` as the step ``name`` (see ``RunCore.step``); once it succeeded,
        remember its compensation. Nothing can cancel between the two: the result is
        remembered in the same synchronous stretch in which the step returns."""
        core = self.core
        do, undo = self._tool_fn(name, do, "do"), self._tool_fn(name, undo, "undo")
        takes_result = self._check_step(name, undo, kwargs)
        pos = core.scope().peek()  # the position core.step takes
        result = yield from stepping.step(core, name, do, args, kwargs)
        # undo gets the result as recorded, not as the workflow may change it meanwhile.
        kept = self._copy(result, do, pos) if takes_result else None
        self.done.append(Done(pos, name, undo, args, kwargs, kept, takes_result))
        return result

    def _tool_fn(self, name: Any, fn: Any, role: str) -> Any:
        """A ``@durably.tool`` as the step function it records (its kind's options, sync
        or async); one that asks a person first is refused: a saga step records its
        action alone, so the approval would be skipped."""
        if not getattr(type(fn), "__durably_tool__", False):
            return fn
        if fn.approval:
            raise self.core.poison(
                ConfigError(
                    f"saga.step({name!r}, ...): the {role} tool {fn.name!r} asks for an"
                    " approval, which a saga step does not request: call"
                    f" ctx.request_approval({fn.name!r}, ...) before it and pass {fn.name}.fn,"
                    " or declare the tool approval=False. The run is blocked; fix the code,"
                    " then resume it."
                )
            )
        return fn.step_function

    def _copy(self, result: Any, do: Callable[..., Any], pos: str) -> Any:
        """A copy of a step's result, as a replay decodes it (typed by do's annotation)."""
        try:
            return codec.loads(
                codec.dumps(result, f"step {pos} output"), signature_of(do).return_hint
            )
        except SerializationError as exc:  # it was just recorded and read back: a bug
            raise self.core.poison(exc) from None

    def _check_step(self, name: Any, undo: Any, kwargs: dict[str, Any]) -> bool:
        """Refuse a call that could not be compensated; whether ``undo`` takes ``result``."""
        core = self.core
        if self.state != "open":
            where = (
                "before its block began"
                if self.state == "new"
                else "after its block ended, so nothing would compensate it"
            )
            raise core.poison(
                ConfigError(
                    f"saga.step({name!r}, ...) was called {where}: call it inside"
                    " `with ctx.saga() as saga:` (async: `async with ctx.saga() as saga:`),"
                    " or open a new saga. The run is blocked; fix the code, then resume it."
                )
            )
        if not callable(undo):
            raise core.poison(
                ConfigError(
                    f"saga.step({name!r}, do, undo, ...): undo ({fn_text(undo)}) is not"
                    " callable; pass the function that undoes do (it gets do's arguments)."
                    " The run is blocked; fix the code, then resume it."
                )
            )
        if isinstance(name, str) and name:
            try:
                check_name(UNDO_PREFIX + name, "saga.step: the compensation's name")
            except ConfigError as exc:
                raise core.poison(exc) from None
        takes_result = _takes_result(undo)
        if takes_result and "result" in kwargs:
            raise core.poison(
                ConfigError(
                    f"saga.step({name!r}, ...): do takes a keyword argument 'result', and undo"
                    " has a 'result' parameter for do's result: the two would collide. Rename"
                    " one of them. The run is blocked; fix the code, then resume it."
                )
            )
        return takes_result

    def exit(self, exc: BaseException | None) -> Generator[Op, Any, None]:
        """The block ends (``__exit__``) with ``exc`` (None on success): compensate when
        that is what ``exc`` calls for, else hand the steps to the enclosing saga.

        Raises ``CompensationFailed`` when a compensation failed for good; otherwise the
        caller lets ``exc`` go on.
        """
        if self.state == "open":
            self.core.open_sagas -= 1
        self.state = "closed"
        if _OPEN.get() is self:
            _OPEN.set(self.parent)
        done, self.done = self.done, []
        if done and exc is not None and self._compensates(exc):
            yield from self._compensate(done, exc)
            return
        # Succeeded, or stopping without compensating: an enclosing saga of the same run
        # takes the steps over, so a later failure of its block undoes them too.
        if done and self.parent is not None and self.parent.state == "open":
            self.parent.done.extend(done)

    def _compensates(self, exc: BaseException) -> bool:
        """Whether a block ending with ``exc`` compensates: an ordinary exception, while
        the run is neither blocked nor stopping, nor is the code's gather branch parked (a
        bare ``except:`` may have turned a stop or a branch's park into an ordinary
        exception: the stop latched in the core, or the branch's park, still decides)."""
        core = self.core
        return (
            isinstance(exc, Exception)
            and core.poisoned is None
            and core.stopped is None
            and core.branch_parked() is None
        )

    def _compensate(self, done: list[Done], exc: BaseException) -> Generator[Op, Any, None]:
        core = self.core
        # Reverse order of completion: the steps of one scope completed in program order,
        # and steps in gather branches are ordered by position, which (unlike timing) a
        # replay reproduces.
        todo = sorted(done, key=lambda d: position_key(d.position), reverse=True)
        error = describe(exc)
        failures: list[StepFailed] = []
        with core.compensation():
            sagas.compensate_begin(core, [d.position for d in todo], error)
            for d in todo:
                try:
                    yield from stepping.step(
                        core, UNDO_PREFIX + d.name, d.undo, d.args, d.undo_kwargs()
                    )
                except StepFailed as failed:
                    # Best effort: the other compensations still run; the first failure is
                    # the one named (anything else, a blocked run or a stop, goes on at once).
                    failures.append(failed)
        if failures:
            raise CompensationFailed(core.run_id, error, tuple(failures), len(todo)) from exc


def describe(exc: BaseException) -> str:
    """How an error that set off compensation reads in messages and the marker."""
    if isinstance(exc, StepFailed):
        return str(exc)  # names the step, its position and the original error
    return f"{type_name(exc)}: {describe_error(exc)}"


def _takes_result(undo: Callable[..., Any]) -> bool:
    try:
        param = inspect.signature(undo).parameters.get("result")
    except (TypeError, ValueError):  # a builtin without a signature: it cannot take it
        return False
    return param is not None and param.kind in (
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        inspect.Parameter.KEYWORD_ONLY,
    )


class Saga:
    """A sync workflow's saga: ``with ctx.saga() as saga: saga.step(name, do, undo, ...)``.

    See :meth:`durably.Context.saga`. Used for one block only.
    """

    __slots__ = ("_ex", "_saga")

    def __init__(self, core: RunCore, executor: Executor) -> None:
        self._saga = SagaCore(core)
        self._ex = executor

    def __enter__(self) -> Saga:
        with self._ex.hold():  # a ctx.branches branch may open one in its own thread
            self._saga.open()
        return self

    def __exit__(self, typ: object, exc: BaseException | None, tb: object) -> None:
        drive_sync(self._ex, self._saga.exit(exc))

    def step(
        self,
        name: str,
        do: Callable[..., T],
        undo: Callable[..., Any],
        /,
        *args: Any,
        **kwargs: Any,
    ) -> T:
        """Run ``do(*args, **kwargs)`` as the recorded step ``name`` (exactly like
        ``ctx.step``: the same position, key, retries and options) and return its result.
        Once it succeeded, ``undo`` becomes its compensation: when this saga's block exits
        with an exception, it runs as the recorded step ``undo:{name}`` with the same
        arguments, plus ``result=`` (do's recorded result) when its signature has a
        ``result`` parameter. ``undo`` takes its own options (``@durably.step``) and gets
        its own idempotency key."""
        misuse = async_step_in_sync(do, "saga.step") or async_step_in_sync(undo, "saga.step")
        if misuse is not None:
            raise self._saga.core.poison(misuse)  # the run blocks: a fix of the code resumes it
        result: T = drive_sync(self._ex, self._saga.step(name, do, undo, args, kwargs))
        return result


class AsyncSaga:
    """An async workflow's saga: ``async with ctx.saga() as saga: await saga.step(...)``.

    See :meth:`durably.AsyncContext.saga`. Used for one block only.
    """

    __slots__ = ("_ex", "_saga")

    def __init__(self, core: RunCore, executor: Executor) -> None:
        self._saga = SagaCore(core)
        self._ex = executor

    async def __aenter__(self) -> AsyncSaga:
        self._saga.open()
        return self

    async def __aexit__(self, typ: object, exc: BaseException | None, tb: object) -> None:
        import asyncio

        task = asyncio.current_task()
        if task is not None:  # a failing gather sibling lets the compensations finish
            COMPENSATING_TASKS.add(task)
        try:
            await drive_async(self._ex, self._saga.exit(exc))
        finally:
            if task is not None:
                COMPENSATING_TASKS.discard(task)

    def __enter__(self) -> None:
        raise self._saga.core.poison(
            ConfigError(
                "`with` on an async workflow's saga: write `async with ctx.saga() as saga:`"
                " and `await saga.step(...)`"
            )
        )

    def __exit__(self, *exc: object) -> None:
        return None  # never reached: __enter__ refused the block

    def step(
        self,
        name: str,
        do: Callable[..., Awaitable[T] | T],
        undo: Callable[..., Any],
        /,
        *args: Any,
        **kwargs: Any,
    ) -> Coroutine[Any, Any, T]:
        """Run ``do`` as the recorded step ``name`` and remember ``undo`` (see
        :meth:`Saga.step`); ``do`` and ``undo`` may be async. Awaitable, and accepted by
        ``ctx.gather`` like ``ctx.step(...)`` (see :meth:`durably.AsyncContext.saga`)."""
        saga = self._saga
        return Recording(
            saga.core,
            name,
            "saga.step(",
            _run_saga_step,
            *(saga, self._ex, name, do, undo, args, kwargs),
        )


def _run_saga_step(
    saga: SagaCore,
    ex: Executor,
    name: str,
    do: Callable[..., Any],
    undo: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Coroutine[Any, Any, Any]:
    """``await saga.step(name, do, undo, *args, **kwargs)`` of an async saga."""
    saga.core.check_dropped()
    return drive_async(ex, saga.step(name, do, undo, args, kwargs))
