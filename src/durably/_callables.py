"""What durably asks of a user's callable, read from its code object when it can be.

``inspect`` (with ``ast``, ``dis``, ``tokenize`` and ``linecache``) was the largest module
left on a resume's path once the records stopped being dataclasses (issue 28): some 36M of
the 226M instructions of importing the engine. Each question a run's path asks of a
function (its parameters' names, whether it is a coroutine function, whether arguments
bind to it, whether a value is awaitable) has an exact answer in a *plain* function's code
object: a ``types.FunctionType`` with neither ``__wrapped__`` nor ``__signature__`` (the
two attributes ``inspect.signature`` follows instead of the code). Anything else (a bound
method, a partial, a class, a decorated function, a builtin) is answered by ``inspect``,
imported then. ``tests/unit/test_callables.py`` compares each answer with inspect's.
"""

from __future__ import annotations

import types
from collections.abc import Awaitable
from typing import Any

# Code flags (the values of inspect.CO_*: fixed by CPython's code objects).
_VARARGS, _VARKEYWORDS, _COROUTINE, _ITERABLE_COROUTINE = 0x04, 0x08, 0x80, 0x100


def plain_code(fn: Any) -> types.CodeType | None:
    """``fn``'s code when its code alone says what inspect would (see the module)."""
    if type(fn) is types.FunctionType:
        attrs = fn.__dict__
        if "__wrapped__" not in attrs and "__signature__" not in attrs:
            return fn.__code__
    return None


def parameter_names(fn: Any) -> tuple[str, ...]:
    """The names of ``inspect.signature(fn).parameters``, in its order (positional, the
    ``*args`` name, keyword-only, the ``**kwargs`` name); raises as it does."""
    code = plain_code(fn)
    if code is None:
        import inspect

        return tuple(inspect.signature(fn).parameters)
    names, argc, kwc, flags = (
        code.co_varnames,
        code.co_argcount,
        code.co_kwonlyargcount,
        code.co_flags,
    )
    star = argc + kwc  # co_varnames: positional, keyword-only, then *args, then **kwargs
    out = names[:argc]
    if flags & _VARARGS:
        out += (names[star],)
        star += 1
    out += names[argc : argc + kwc]
    if flags & _VARKEYWORDS:
        out += (names[star],)
    return out


def keyword_only_names(fn: Any) -> tuple[str, ...]:
    """The keyword-only parameters of ``fn``, in order."""
    code = plain_code(fn)
    if code is None:
        import inspect

        params = inspect.signature(fn).parameters.values()
        return tuple(p.name for p in params if p.kind is p.KEYWORD_ONLY)
    argc = code.co_argcount
    names: tuple[str, ...] = code.co_varnames[argc : argc + code.co_kwonlyargcount]
    return names


def takes_positional(fn: Any) -> bool | None:
    """Whether ``fn``'s first parameter can take a positional argument (None: not a plain
    function, ask inspect)."""
    code = plain_code(fn)
    if code is None:
        return None
    return code.co_argcount > 0 or bool(code.co_flags & _VARARGS)


def is_coroutine_function(fn: Any) -> bool:
    """``inspect.iscoroutinefunction(fn)``."""
    code = plain_code(fn)
    if code is None:
        import inspect

        return inspect.iscoroutinefunction(fn)
    return bool(code.co_flags & _COROUTINE)


def binds(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """True when ``fn(*args, **kwargs)`` certainly binds (``inspect.signature(fn).bind``
    would succeed); False when it may not, or ``fn`` is not plain: then ask inspect,
    whose error says why. Only a certain True is ever answered here."""
    code = plain_code(fn)
    if code is None:
        return False
    names, argc, kwc, flags = (
        code.co_varnames,
        code.co_argcount,
        code.co_kwonlyargcount,
        code.co_flags,
    )
    if len(args) > argc and not flags & _VARARGS:
        return False
    filled = set(names[: min(len(args), argc)])
    by_keyword = names[code.co_posonlyargcount : argc + kwc]
    for key in kwargs:
        if key in filled:
            return False
        if key in by_keyword:
            filled.add(key)
        elif not flags & _VARKEYWORDS:
            return False
    defaults = len(fn.__defaults__ or ())
    kwdefaults = fn.__kwdefaults__ or {}
    required = names[: argc - defaults] + tuple(
        name for name in names[argc : argc + kwc] if name not in kwdefaults
    )
    return all(name in filled for name in required)


def isawaitable(value: Any) -> bool:
    """``inspect.isawaitable(value)``: a coroutine, a generator-based coroutine, or an
    object with ``__await__``."""
    return (
        isinstance(value, types.CoroutineType)
        or (
            isinstance(value, types.GeneratorType)
            and bool(value.gi_code.co_flags & _ITERABLE_COROUTINE)
        )
        or isinstance(value, Awaitable)
    )
