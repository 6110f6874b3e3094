"""The awaitable every recording call of an async workflow returns.

A :class:`Recording` is a coroutine (so ``asyncio.create_task`` and ``asyncio.wait_for``
take it) that records when it first runs, refuses to be used as a value, and blocks the
run when it is dropped without being awaited.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Generator
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from ..errors import ConfigError
from ..features import signals
from ..replay import stepping
from ..replay.kernel import RunCore
from ..replay.ops import Op
from ..replay.park import Parked
from .drive import Executor, drive_async
from .settle import keep_branch_wait, parked_before, siblings_first

if TYPE_CHECKING:
    from ..approvals import Decision

T = TypeVar("T")


class Recording(Coroutine[Any, Any, T]):
    """What :class:`AsyncContext`'s recording methods (and ``saga.step``) return: a
    coroutine (so ``asyncio.create_task`` and ``asyncio.wait_for`` take it) that records
    when it first runs, and that refuses to be used as a value (see
    :class:`AsyncContext`).

    One class for every call: ``run(*args)`` makes the coroutine that records it (one of
    the ``run_*`` functions below, or the facade's own), ``label`` is what a gather
    records for a branch that is this call, and ``text`` how the call reads in code for
    error messages (a text ending in ``(`` is completed with the label:
    ``ctx.step(`` reads ``ctx.step('fetch', ...)``).
    """

    __slots__ = ("_args", "_core", "_inner", "_run", "_text", "_used", "label")

    def __init__(
        self,
        core: RunCore,
        label: str,
        text: str,
        run: Callable[..., Coroutine[Any, Any, T]],
        *args: Any,
    ) -> None:
        self._core = core
        self._inner: Coroutine[Any, Any, T] | None = None
        self._used = False
        self.label = label
        self._text = text
        self._run = run
        self._args = args

    def _call(self) -> str:
        """How the call reads in code, e.g. ``ctx.now()`` (for error messages)."""
        text = self._text
        return f"{text}{self.label!r}, ...)" if text.endswith("(") else text

    def _start(self) -> Coroutine[Any, Any, T]:
        if self._inner is None:
            if self._used:
                raise RuntimeError(f"{self._call()} was already awaited or closed")
            self._used = True
            self._inner = self._run(*self._args)
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


STEP_TEXT = "ctx.step("
"""The ``text`` of a ``ctx.step`` call (completed with its name)."""


def run_step(
    core: RunCore,
    ex: Executor,
    name: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Coroutine[Any, Any, Any]:
    """``await ctx.step(name, fn, *args, **kwargs)``."""
    if core.dropped is not None:
        raise core.poison(ConfigError(core.dropped))
    return drive_async(ex, stepping.step(core, name, fn, args, kwargs))


def run_approval(
    core: RunCore,
    ex: Executor,
    action: str,
    args: Any,
    timeout_s: float | None,
    on_timeout: str | Callable[[], Any],
) -> Coroutine[Any, Any, Decision]:
    """``await ctx.request_approval(...)``; a request that parked in an earlier attempt
    inside a gather branch lets its siblings replay first."""
    from ..features import approvals  # with the first request, as in Context (issue 28)

    core.check_dropped()
    if parked_before(core):
        return _after_siblings(
            ex, lambda: approvals.request_approval(core, action, args, timeout_s, on_timeout)
        )
    return drive_async(ex, approvals.request_approval(core, action, args, timeout_s, on_timeout))


def run_value(core: RunCore, produce: Callable[[RunCore], T]) -> Coroutine[Any, Any, T]:
    """``await ctx.now()`` and co. (``produce`` is ``replay.values.now`` and co.):
    recorded at once (no I/O)."""
    core.check_dropped()
    return at_once(produce(core))


def run_signal(
    core: RunCore, ex: Executor, name: str, timeout_s: float | None, default: Any
) -> Coroutine[Any, Any, Any]:
    """``await ctx.wait_for_signal(...)``; as :func:`run_approval` after an earlier park,
    and a wait that parks only its gather branch writes its ``waiting`` record now."""
    core.check_dropped()
    if parked_before(core):
        return _after_siblings(ex, lambda: signals.wait_for_signal(core, name, timeout_s, default))
    return _first_signal_wait(core, ex, name, timeout_s, default)


async def _first_signal_wait(
    core: RunCore, ex: Executor, name: str, timeout_s: float | None, default: Any
) -> Any:
    gen = signals.wait_for_signal(core, name, timeout_s, default)
    try:
        return await drive_async(ex, gen)
    except Parked as parked:
        if core.stopped is parked:
            raise
        await keep_branch_wait(ex, parked)


def run_sleep(core: RunCore, ex: Executor, timer: Callable[[], None]) -> Coroutine[Any, Any, None]:
    """``await ctx.sleep(...)`` / ``ctx.sleep_until(...)``: records (and parks, when the
    timer is not due) when first run."""
    core.check_dropped()
    if parked_before(core):
        return _timer_after_siblings(ex, timer)
    try:
        timer()
    except Parked as parked:
        if core.stopped is parked:
            raise  # a top-level timer: the park (latched) writes its record
        return keep_branch_wait(ex, parked)
    return at_once(None)


async def _after_siblings(ex: Executor, make: Callable[[], Generator[Op, Any, T]]) -> T:
    await siblings_first(ex)
    return await drive_async(ex, make())


async def _timer_after_siblings(ex: Executor, timer: Callable[[], None]) -> None:
    await siblings_first(ex)
    timer()


async def at_once(value: T) -> T:
    return value


async def unstarted() -> Any:
    return None
