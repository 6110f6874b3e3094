"""The awaitable every recording call of an async workflow returns.

A :class:`Recording` is a coroutine (so ``asyncio.create_task`` and ``asyncio.wait_for``
take it) that records when it first runs, refuses to be used as a value, and blocks the
run when it is dropped without being awaited.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Coroutine, Generator
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from ..errors import (
    ConfigError,
)
from ..features import approvals, signals
from ..replay import stepping
from ..replay.kernel import (
    RunCore,
)
from ..replay.park import Parked
from .drive import Executor, drive_async

if TYPE_CHECKING:
    from ..approvals import Decision
from .settle import keep_branch_wait, parked_before, siblings_first

T = TypeVar("T")


class Recording(Coroutine[Any, Any, T]):
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
            self._inner = unstarted()
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
            self._core.drop(
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


class StepCall(Recording[T]):
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
        return drive_async(
            self._ex, stepping.step(core, self.label, self._fn, self._args, self._kwargs)
        )


class ApprovalCall(Recording["Decision"]):
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
        if parked_before(core):
            return self._settled()
        gen = approvals.request_approval(
            core, self._action, self._args, self._timeout_s, self._on_timeout
        )
        return drive_async(self._ex, gen)

    async def _settled(self) -> Decision:
        await siblings_first(self._ex)
        gen = approvals.request_approval(
            self._core, self._action, self._args, self._timeout_s, self._on_timeout
        )
        return await drive_async(self._ex, gen)


class ValueCall(Recording[T]):
    __slots__ = ("_produce", "label")

    def __init__(self, core: RunCore, kind: str, produce: Callable[[], T]) -> None:
        super().__init__(core)
        self.label = f"durably.{kind}"
        self._produce = produce

    def _call(self) -> str:
        return f"ctx.{self.label[8:]}()"

    def _run(self) -> Coroutine[Any, Any, T]:
        self._core.check_dropped()
        return at_once(self._produce())


class PlainCall(Recording[T]):
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


class SignalWait(Recording[Any]):
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
        if parked_before(core):
            return self._settled()
        return self._first()

    async def _first(self) -> Any:
        gen = signals.wait_for_signal(self._core, self._name, self._timeout_s, self._default)
        try:
            return await drive_async(self._ex, gen)
        except Parked as parked:
            if self._core.stopped is parked:
                raise
            await keep_branch_wait(self._ex, parked)

    async def _settled(self) -> Any:
        await siblings_first(self._ex)
        gen = signals.wait_for_signal(self._core, self._name, self._timeout_s, self._default)
        return await drive_async(self._ex, gen)


class SleepCall(Recording[None]):
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
        if parked_before(self._core):
            return self._settled()
        try:
            self._timer()
        except Parked as parked:
            if self._core.stopped is parked:
                raise  # a top-level timer: the park (latched) writes its record
            return keep_branch_wait(self._ex, parked)
        return at_once(None)

    async def _settled(self) -> None:
        await siblings_first(self._ex)
        self._timer()


async def at_once(value: T) -> T:
    return value


async def unstarted() -> Any:
    return None
