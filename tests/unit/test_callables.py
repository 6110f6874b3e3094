"""durably._callables answers as inspect does (issue 28: a resume no longer imports it).

Each question is asked of plain functions of every parameter shape, and of the callables
a plain function's code cannot speak for (decorated, partial, bound method, class,
builtin, a callable object), and compared with inspect's own answer.
"""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable
from typing import Any

import pytest

from durably import _callables as c


def f0() -> None: ...
def f1(ctx: Any) -> None: ...
def f2(ctx: Any, a: int, b: int = 2) -> None: ...
def f3(ctx: Any, /, a: int, *rest: Any, k: int, idempotency_key: str = "", **more: Any) -> None: ...
def f4(*args: Any) -> None: ...
def f5(*, ctx: Any, fencing_token: int) -> None: ...
def f6(a: Any, b: Any, /, c: Any = 1, *, d: Any = 2) -> None: ...
def f7(**kw: Any) -> None: ...
async def a1(ctx: Any, x: int) -> None: ...


def _gen() -> Any:
    yield 1


@functools.wraps(f2)
def wrapped(*args: Any, **kwargs: Any) -> None: ...


def signed(x: Any) -> None: ...


signed.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [inspect.Parameter("other", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
)


class Obj:
    def method(self, ctx: Any, idempotency_key: str) -> None: ...

    async def amethod(self) -> None: ...

    def __call__(self, ctx: Any) -> None: ...


def _name(fn: Any) -> str:
    """A test id that is the same in every worker (a repr names an address)."""
    return type(fn).__name__ + ":" + getattr(fn, "__name__", getattr(fn, "__qualname__", ""))


PLAIN = [f0, f1, f2, f3, f4, f5, f6, f7, a1]
OTHER: list[Callable[..., Any]] = [
    wrapped,
    signed,
    functools.partial(f2, None),
    Obj().method,
    Obj().amethod,
    Obj,
    Obj(),
    len,
]


@pytest.mark.parametrize("fn", PLAIN + OTHER, ids=_name)
def test_names_and_coroutine_flag_are_inspects(fn: Callable[..., Any]) -> None:
    params = inspect.signature(fn).parameters
    assert c.parameter_names(fn) == tuple(params)
    assert c.keyword_only_names(fn) == tuple(
        n for n, p in params.items() if p.kind is p.KEYWORD_ONLY
    )
    assert c.is_coroutine_function(fn) == inspect.iscoroutinefunction(fn)
    assert (c.plain_code(fn) is not None) == (fn in PLAIN)
    if fn in PLAIN:
        first = next(iter(params.values()), None)
        assert c.takes_positional(fn) == (
            first is not None
            and first.kind is not first.KEYWORD_ONLY
            and first.kind is not first.VAR_KEYWORD
        )
    else:
        assert c.takes_positional(fn) is None


CALLS: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
    ((), {}),
    ((None,), {}),
    ((None, 1), {}),
    ((None, 1, 2), {}),
    ((None, 1, 2, 3), {}),
    ((None,), {"a": 1}),
    ((None, 1), {"a": 1}),
    ((None,), {"a": 1, "b": 2}),
    ((None, 1), {"k": 1}),
    ((None, 1, 2), {"k": 1, "idempotency_key": "x", "z": 3}),
    ((None,), {"ctx": 1}),
    ((), {"ctx": 1, "fencing_token": 2}),
    ((1, 2), {"c": 3, "d": 4}),
    ((1,), {"b": 2}),
    ((), {"x": 1}),
]


@pytest.mark.parametrize("fn", PLAIN + OTHER, ids=_name)
def test_binds_is_never_true_where_inspect_refuses(fn: Callable[..., Any]) -> None:
    for args, kwargs in CALLS:
        try:
            inspect.signature(fn).bind(*args, **kwargs)
            ok = True
        except TypeError:
            ok = False
        got = c.binds(fn, args, kwargs)
        if fn in PLAIN:
            assert got == ok, (args, kwargs)  # exact for a plain function
        else:
            assert got is False  # not plain: left to inspect


def test_isawaitable_is_inspects() -> None:
    async def coro() -> None: ...

    started = coro()
    generator_coro = types.coroutine(_gen)()

    class Awaits:
        def __await__(self) -> Any:
            yield

    values = [started, generator_coro, Awaits(), _gen(), 1, {"a": 1}, None, coro]
    try:
        for v in values:
            assert c.isawaitable(v) == inspect.isawaitable(v), v
    finally:
        started.close()
