"""Step options (``@durably.step``), what a step function's signature asks for, and spend.

``@durably.step(...)`` does not wrap the function: it attaches a :class:`StepOptions` and
returns the same function, so it can still be called directly in tests.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import weakref
from collections.abc import Callable, Collection
from typing import Any, Final, Literal, TypeVar

from . import codec
from ._callables import is_coroutine_function, parameter_names, plain_code
from ._record import Record, set_field
from .errors import ConfigError
from .limits import BACKOFF_MAX_S as BACKOFF_MAX_S
from .limits import RETRIES_MAX as RETRIES_MAX

F = TypeVar("F", bound=Callable[..., Any])
_ATTR: Final = "__durably_step__"


class StepOptions(Record, frozen=True):
    """How a step runs: retries, backoff, timeout, and whether it is an effect."""

    __slots__ = (
        "backoff_max_s",
        "backoff_s",
        "dedupe_window_s",
        "effect",
        "no_retry",
        "on_doubt",
        "reconcile",
        "retries",
        "retry_on",
        "timeout_s",
    )

    retries: int
    backoff_s: float
    backoff_max_s: float
    timeout_s: float | None
    retry_on: tuple[type[BaseException], ...]
    no_retry: tuple[type[BaseException], ...]
    effect: bool
    reconcile: Callable[[str], Any] | None
    on_doubt: Literal["park", "retry"]
    dedupe_window_s: float | None

    def __init__(
        self,
        retries: int = 0,
        backoff_s: float = 1.0,
        backoff_max_s: float = 60.0,
        timeout_s: float | None = None,
        retry_on: tuple[type[BaseException], ...] = (Exception,),
        no_retry: tuple[type[BaseException], ...] = (),
        effect: bool = False,
        reconcile: Callable[[str], Any] | None = None,
        on_doubt: Literal["park", "retry"] = "park",
        dedupe_window_s: float | None = None,
    ) -> None:
        set_field(self, "retries", retries)
        set_field(self, "backoff_s", backoff_s)
        set_field(self, "backoff_max_s", backoff_max_s)
        set_field(self, "timeout_s", timeout_s)
        set_field(self, "retry_on", retry_on)
        set_field(self, "no_retry", no_retry)
        set_field(self, "effect", effect)
        set_field(self, "reconcile", reconcile)
        set_field(self, "on_doubt", on_doubt)
        set_field(self, "dedupe_window_s", dedupe_window_s)

    def retryable(self, exc: BaseException, attempt: int) -> bool:
        """Whether attempt number ``attempt`` (1-based) that raised ``exc`` is retried."""
        if attempt > self.retries:
            return False
        if isinstance(exc, self.no_retry):
            return False
        return isinstance(exc, self.retry_on)

    def delay_s(self, key: str, attempt: int) -> float:
        """Backoff before attempt ``attempt + 1``: exponential, with a jitter that is a
        pure function of the key and attempt, so a replayed schedule is the same."""
        base = min(self.backoff_max_s, self.backoff_s * (2 ** (attempt - 1)))
        h = hashlib.sha256(f"{key}#{attempt}".encode()).digest()
        return float(base * (0.5 + 0.5 * (int.from_bytes(h[:4], "big") / 0xFFFFFFFF)))


DEFAULT_OPTIONS: Final = StepOptions()


def step(
    *,
    retries: int = 0,
    backoff: float = 1.0,
    backoff_max_s: float = 60.0,
    timeout_s: float | None = None,
    retry_on: tuple[type[BaseException], ...] = (Exception,),
    no_retry: tuple[type[BaseException], ...] = (),
    effect: bool = False,
    reconcile: Callable[[str], Any] | None = None,
    on_doubt: Literal["park", "retry"] = "park",
    dedupe_window_s: float | None = None,
) -> Callable[[F], F]:
    """Declare how a step function runs when called through ``ctx.step``.

    ``retries=N`` allows N more attempts (N+1 in all), every one with the same idempotency
    key; ``backoff`` is the first delay in seconds, doubled per attempt up to
    ``backoff_max_s``, with jitter. ``retry_on`` selects retryable exception types and
    ``no_retry`` excludes some. ``timeout_s`` bounds one attempt. ``effect=True`` records
    an intent before each call, so a crash between the effect and its record is detected on
    resume: then ``reconcile(key)`` is asked for the outcome if given, else the step is
    re-run with the same key if it takes ``idempotency_key``, else the run parks as
    ``in_doubt`` for a person (unless ``on_doubt="retry"``).
    """
    if not 0 <= retries <= RETRIES_MAX:
        raise ConfigError(f"retries={retries}: choose 0..{RETRIES_MAX}")
    if backoff < 0 or backoff_max_s < 0 or backoff_max_s > BACKOFF_MAX_S:
        raise ConfigError(f"backoff must be >= 0 s and backoff_max_s <= {BACKOFF_MAX_S:g} s")
    if timeout_s is not None and timeout_s <= 0:
        raise ConfigError(f"timeout_s={timeout_s}: must be > 0 (or None for no timeout)")
    if on_doubt not in ("park", "retry"):
        raise ConfigError(f"on_doubt={on_doubt!r}: choose 'park' or 'retry'")
    if dedupe_window_s is not None and dedupe_window_s <= 0:
        raise ConfigError(f"dedupe_window_s={dedupe_window_s}: must be > 0 (or None)")
    if reconcile is not None and not callable(reconcile):
        raise ConfigError("reconcile must be a callable taking the idempotency key")
    opts = StepOptions(
        retries=retries,
        backoff_s=backoff,
        backoff_max_s=backoff_max_s,
        timeout_s=timeout_s,
        retry_on=tuple(retry_on),
        no_retry=tuple(no_retry),
        effect=effect or reconcile is not None,
        reconcile=reconcile,
        on_doubt=on_doubt,
        dedupe_window_s=dedupe_window_s,
    )

    def attach(fn: F) -> F:
        setattr(fn, _ATTR, opts)
        with contextlib.suppress(TypeError):  # not weakly referenceable: never cached
            _SIGNATURES.pop(_cache_key(fn), None)
        return fn

    return attach


class StepSignature(Record, frozen=True):
    """What durably learns once from a step function's signature."""

    __slots__ = ("is_async", "options", "return_hint", "takes_key", "takes_token")

    options: StepOptions
    takes_key: bool
    takes_token: bool
    is_async: bool
    return_hint: Any

    def __init__(
        self,
        options: StepOptions,
        takes_key: bool,
        takes_token: bool,
        is_async: bool,
        return_hint: Any = None,
    ) -> None:
        set_field(self, "options", options)
        set_field(self, "takes_key", takes_key)
        set_field(self, "takes_token", takes_token)
        set_field(self, "is_async", is_async)
        set_field(self, "return_hint", return_hint)


# Weak keys: a workflow may pass a fresh lambda or closure to every ctx.step, and a
# long-lived worker must not keep each one (and everything it captured) forever. The
# values never refer back to the function, so an entry dies with its function.
_SIGNATURES: weakref.WeakKeyDictionary[Any, StepSignature] = weakref.WeakKeyDictionary()


def _cache_key(fn: Any) -> Any:
    return getattr(fn, "__func__", fn)


def signature_of(fn: Callable[..., Any]) -> StepSignature:
    """The cached :class:`StepSignature` of ``fn``."""
    key = _cache_key(fn)
    try:
        cached = _SIGNATURES.get(key)
    except TypeError:  # unhashable or not weakly referenceable: introspect every time
        return _introspect(fn)
    if cached is None:
        cached = _introspect(fn)
        _SIGNATURES[key] = cached
    return cached


def _introspect(fn: Callable[..., Any]) -> StepSignature:
    params: Collection[str]
    if plain_code(fn) is not None:  # its code says it all: no inspect (issue 28)
        params, is_async = parameter_names(fn), is_coroutine_function(fn)
    else:
        import inspect

        try:
            params = inspect.signature(fn).parameters
        except (TypeError, ValueError):
            params = ()
        target = getattr(fn, "__call__", None) if not inspect.isroutine(fn) else fn  # noqa: B004
        is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(target)
    return StepSignature(
        options=getattr(fn, _ATTR, DEFAULT_OPTIONS),
        takes_key="idempotency_key" in params,
        takes_token="fencing_token" in params,
        is_async=is_async,
        return_hint=codec.return_hint(fn),
    )


class Usage(Record, uncompared=("late",), unshown=("late",)):
    """Spend a step reported with :func:`usage` (summed over the calls of one attempt)."""

    __slots__ = ("cost_usd", "input_tokens", "late", "output_tokens", "reported", "split", "tokens")

    tokens: int
    cost_usd: float
    reported: bool
    input_tokens: int
    output_tokens: int
    # Whether input/output tokens were reported at all (the ledger keeps NULL otherwise).
    split: bool
    # Set by the driver when the attempt timed out while its code runs on (a thread cannot
    # be stopped): called after each later report, it charges the new spend as it arrives.
    late: Callable[[Usage], None] | None

    def __init__(
        self,
        tokens: int = 0,
        cost_usd: float = 0.0,
        reported: bool = False,
        input_tokens: int = 0,
        output_tokens: int = 0,
        split: bool = False,
        late: Callable[[Usage], None] | None = None,
    ) -> None:
        self.tokens = tokens
        self.cost_usd = cost_usd
        self.reported = reported
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        self.split = split
        self.late = late


USAGE: contextvars.ContextVar[Usage | None] = contextvars.ContextVar("durably_usage", default=None)


def usage(
    tokens: int | None = None,
    cost_usd: float = 0.0,
    *,
    input_tokens: int | None = None,
    output_tokens: int | None = None,
) -> None:
    """Report model spend from inside a step: ``tokens`` (by default ``input_tokens +
    output_tokens``), ``input_tokens``, ``output_tokens`` and ``cost_usd`` (US dollars).

    Calls add up within one attempt. The attempt's usage goes to the run's spend ledger
    as soon as the call returns (before its result is recorded, so a crash in between
    still counts it), and with the step's record. An attempt that ran past its
    ``timeout_s`` goes on in the background: what it reports after the timeout reaches
    the ledger when it arrives (and counts against the budget). Token counts are ints
    >= 0, the cost a finite number >= 0; anything else raises ``ConfigError``. Outside a
    step this checks the numbers and records nothing, so tools stay usable without
    durably.
    """
    from .budget import check_cost, check_tokens

    ins = 0 if input_tokens is None else check_tokens(input_tokens, "usage(input_tokens=...)")
    outs = 0 if output_tokens is None else check_tokens(output_tokens, "usage(output_tokens=...)")
    total = ins + outs if tokens is None else check_tokens(tokens, "usage(tokens=...)")
    cost = check_cost(cost_usd, "usage(cost_usd=...)")
    box = USAGE.get()
    if box is None:
        return
    box.tokens += total
    box.input_tokens += ins
    box.output_tokens += outs
    box.split = box.split or input_tokens is not None or output_tokens is not None
    box.cost_usd += cost
    box.reported = True
    late = box.late  # read after the sums: a report racing the timeout is charged once
    if late is not None:
        late(box)


def fn_text(fn: Any) -> str:
    """How a step's function (or what was passed as one) is named in a message: its
    qualified name, never its ``repr``, which may quote values (a ``functools.partial``
    lists the arguments bound into it, such as an API key; an object's repr may show its
    fields; a value passed where a function belongs is the value). Messages reach
    events, spans and exception text, which leave the process."""
    if isinstance(fn, functools.partial):
        return f"functools.partial({fn_text(fn.func)}, ...)"
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    if isinstance(name, str) and name:
        return name
    kind = "object" if callable(fn) else "value"
    type_name = type(fn).__qualname__
    return f"{'an' if type_name[:1].lower() in 'aeiou' else 'a'} {type_name} {kind}"


def given_text(value: Any) -> str:
    """What was passed where a name (or a Budget) belongs, for a message that leaves the
    process: a str as its repr (cut to 100 characters), anything else by
    :func:`fn_text`, never its repr (a ``functools.partial`` passed by mistake lists the
    API key bound into it)."""
    return repr(value[:100]) if isinstance(value, str) else fn_text(value)


_UNTYPED_WARNED: set[tuple[str, str]] = set()


def warn_untyped_result(name: str, fn: Callable[..., Any], value: Any) -> None:
    """Warn once per step name and type when a step without a return annotation returned
    a pydantic model: it is recorded as a plain object and comes back (live too) as a
    ``dict``, so ``result.field`` would fail after the work was done."""
    cls = type(value)
    if not (callable(getattr(value, "model_dump", None)) and hasattr(cls, "model_validate")):
        return
    type_name = f"{cls.__module__}.{cls.__qualname__}"
    if (name, type_name) in _UNTYPED_WARNED:
        return
    _UNTYPED_WARNED.add((name, type_name))
    import warnings

    fn_name = fn_text(fn)  # never repr: a partial lists the values bound into it
    warnings.warn(
        f"step {name!r} returned a pydantic model ({type_name}) but {fn_name} has no return"
        " annotation, so its result is returned as a dict (live and on replay); add the"
        f" annotation `-> {cls.__qualname__}` to {fn_name} to get a {cls.__qualname__} back",
        UserWarning,
        stacklevel=2,
    )
