"""What the model-client wrappers share: the proxy over a client's resource tree, the
recorded call (digest, retries, usage, typed result) and the refusals.

Only durably's public API is used here: ``durably.current_context()`` says whether the
code runs in a workflow's body (then a recorded method is a ``ctx.step``) or anywhere
else (outside a run, or inside a running step: the call passes through untouched).
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn

# durably's public API only (the import-linter contract in pyproject.toml keeps it so),
# plus the reader of durably.step_name's context variable.
from .. import AsyncContext, ConfigError, Context, SerializationError, StepTimeout, current_context
from .. import step as step_options
from .. import usage as report_usage
from ..limits import COST_USD_MAX, TOKENS_MAX
from ..naming import current_step_name
from ._attempts import Attempts, provider_errors
from ._streams import StreamCut, StreamSpec, open_stream

# Call options that shape how a request travels, not what it asks: left out of the
# digest (a changed timeout is not a changed call) and never recorded (headers carry
# credentials).
TRANSPORT: frozenset[str] = frozenset({"timeout", "extra_headers", "extra_query", "max_retries"})

Prices = Mapping[str, tuple[float, float]]


class IntegrationWarning(UserWarning):
    """A wrapped client's call that durably does not record, or a model without a price."""


class WrapRefused(ConfigError, SerializationError):
    """A wrapped client's call durably cannot record as it is (a sync client in an async
    workflow, ``stream=True``, a non-JSON ``extra_body``, ...). A ``ConfigError``; raised
    through ``ctx.step`` so the run ends ``blocked`` (fix the code, then ``durably
    retry``), never ``failed``, and nothing recorded is lost."""


def _context() -> Context | AsyncContext | None:
    """The running workflow's context, else None (outside a run, inside a step)."""
    return current_context()


@dataclass(frozen=True, slots=True)
class Method:
    """A recorded method: where it is in the client, its step name, how its result is
    rebuilt and what it spent."""

    path: tuple[str, ...]
    step: str
    # (response JSON, the call's keyword arguments) -> the client's own response type.
    rebuild: Callable[[Any, Mapping[str, Any]], Any]
    # response JSON -> (input tokens, output tokens)
    tokens: Callable[[Any], tuple[int, int]]
    # How a streamed call of this method is recorded (stream=True, or always for a
    # method that only streams: Anthropic's messages.stream); None: streaming refused.
    stream: StreamSpec | None = None
    # The method only streams (it takes no stream argument).
    streams_only: bool = False


@dataclass(frozen=True, slots=True)
class Provider:
    """What one provider's wrapper needs to know about its client library."""

    name: str  # "openai"
    sync_types: tuple[type, ...]
    async_types: tuple[type, ...]
    sync_name: str  # "openai.OpenAI"
    async_name: str  # "openai.AsyncOpenAI"
    methods: Mapping[tuple[str, ...], Method]
    retryable: tuple[type[BaseException], ...]
    status_error: type[BaseException]
    sentinels: tuple[type, ...]
    # (argument name, value) -> the value as the digest sees it (e.g. a pydantic class
    # as its JSON schema); None: the value as it is.
    digest_value: Callable[[str, Any], Any] | None = None
    prefixes: frozenset[tuple[str, ...]] = field(default=frozenset())

    def __post_init__(self) -> None:
        pre = {m[:i] for m in self.methods for i in range(1, len(m))}
        object.__setattr__(self, "prefixes", frozenset(pre))


@dataclass(frozen=True, slots=True)
class Settings:
    """``wrap``'s options, checked."""

    prices: dict[str, tuple[float, float]] | None
    retries: int
    timeout_s: float | None


def check_settings(prices: Any, retries: Any, timeout_s: Any) -> Settings:
    """``wrap``'s options, or ``ConfigError`` naming the bad one."""
    if isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= 100:
        raise ConfigError(f"wrap(retries={retries!r}): choose an int from 0 to 100")
    if timeout_s is not None and (
        isinstance(timeout_s, bool)
        or not isinstance(timeout_s, int | float)
        or not math.isfinite(timeout_s)
        or timeout_s <= 0
    ):
        raise ConfigError(f"wrap(timeout_s={timeout_s!r}): seconds > 0, or None for no limit")
    checked: dict[str, tuple[float, float]] | None = None
    if prices is not None:
        if not isinstance(prices, Mapping):
            raise ConfigError(
                "wrap(prices=...) takes {model: (usd_per_million_input,"
                f" usd_per_million_output)}}, got {type(prices).__name__}"
            )
        checked = {}
        for model, pair in prices.items():
            ok = (
                isinstance(model, str)
                and isinstance(pair, tuple | list)
                and len(pair) == 2
                and all(
                    isinstance(p, int | float)
                    and not isinstance(p, bool)
                    and math.isfinite(p)
                    and p >= 0
                    for p in pair
                )
            )
            if not ok:
                raise ConfigError(
                    f"wrap(prices=...): the entry for {model!r:.80} must be (usd_per_million_"
                    "input, usd_per_million_output), two finite numbers >= 0"
                )
            checked[model] = (float(pair[0]), float(pair[1]))
    return Settings(checked, retries, timeout_s)


def refuse(ctx: Context | AsyncContext, name: str, message: str) -> NoReturn:
    """Raise :class:`WrapRefused` (``message``) through ``ctx.step``, so the run ends
    ``blocked``: durably blocks a run whose step cannot be encoded, and the refusal is an
    argument whose encoding fails with this error. Nothing is recorded at the position;
    once the code is fixed, the retried run replays up to here and goes live."""
    err = WrapRefused(message)
    call: Any = ctx.step(name, _never, _Refusal(err))
    if isinstance(ctx, AsyncContext):
        # The awaitable records when it first runs; the refusal raises before anything
        # is awaited, so running it here (from sync code too) is enough.
        try:
            call.send(None)
        finally:
            call.close()
    raise err


def _never(*_: Any) -> None:  # pragma: no cover - a refused step never runs
    raise AssertionError("a refused call ran")


class _Refusal:
    """A step argument whose encoding raises the refusal (see :func:`refuse`)."""

    __slots__ = ("err",)

    def __init__(self, err: WrapRefused) -> None:
        self.err = err

    def model_dump(self, **_: Any) -> NoReturn:
        raise self.err

    @classmethod
    def model_validate(cls, _: Any) -> NoReturn:  # pragma: no cover - never decoded
        raise AssertionError("a refusal is never decoded")


class Client:
    """The shared state of one wrapped client (the root of its proxy tree)."""

    def __init__(self, provider: Provider, client: Any, settings: Settings) -> None:
        self.provider = provider
        self.client = client
        self.settings = settings
        self.is_async = isinstance(client, provider.async_types)
        self._quiet: Any = None  # the client with max_retries=0: attempts are durably's
        self._lock = threading.Lock()
        self._warned: set[tuple[str, ...]] = set()
        self._options: Callable[[Any], Any] | None = None
        self._targets: dict[tuple[str, ...], Any] = {}

    def warn_once(self, key: tuple[str, ...], message: str) -> None:
        """Warn ``message`` (an :class:`IntegrationWarning`) the first time this wrapped
        client (and the clients ``with_options`` made from it) sees ``key``."""
        with self._lock:
            if key in self._warned:
                return
            self._warned.add(key)
        warnings.warn(message, IntegrationWarning, stacklevel=4)

    def quiet(self) -> Any:
        """The client with its own retries off (``with_options(max_retries=0)``)."""
        if self._quiet is None:
            with self._lock:
                if self._quiet is None:
                    self._quiet = self.client.with_options(max_retries=0)
        return self._quiet

    def target(self, path: tuple[str, ...]) -> Any:
        """The method at ``path`` of the client with its own retries off."""
        found = self._targets.get(path)
        if found is None:
            found = self.quiet()
            for part in path:
                found = getattr(found, part)
            self._targets[path] = found
        return found

    # -- one recorded call -----------------------------------------------------------------

    def call_name(self, m: Method) -> str:
        return f"client.{'.'.join(m.path)}(...)"

    def prepare(
        self,
        ctx: Context | AsyncContext,
        m: Method,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        streaming: bool = False,
    ) -> tuple[str, dict[str, Any]]:
        """The step name and the arguments its digest covers, or a refusal."""
        name = current_step_name() or m.step
        p = self.provider
        wants_async = isinstance(ctx, AsyncContext)
        if wants_async and not self.is_async:
            refuse(
                ctx,
                name,
                f"{self.call_name(m)} on a sync {p.sync_name} client in an async workflow"
                " would block its event loop: wrap a"
                f" {p.async_name} client and `await` the call, or make the call inside a"
                " plain sync step (ctx.step)",
            )
        if not wants_async and self.is_async:
            refuse(
                ctx,
                name,
                f"{self.call_name(m)} on an async {p.async_name} client in a sync workflow"
                f" cannot be awaited: wrap a {p.sync_name} client, or make the workflow"
                " `async def`",
            )
        if args:
            refuse(
                ctx,
                name,
                f"{self.call_name(m)} takes keyword arguments only; got {len(args)} positional",
            )
        if kwargs.get("stream") is True and not streaming:
            refuse(
                ctx,
                name,
                f"{self.call_name(m)} has no streamed form durably records: call it"
                " without stream=True (the recorded step returns the whole response), or"
                " stream inside a plain step (ctx.step)",
            )
        body: dict[str, Any] = {}
        for key, value in kwargs.items():
            if key in TRANSPORT or isinstance(value, p.sentinels):
                continue
            if key == "extra_body" and value is not None:
                try:
                    json.dumps(value, allow_nan=False)
                except (TypeError, ValueError) as exc:
                    refuse(
                        ctx,
                        name,
                        f"{self.call_name(m)}: extra_body is not JSON ({exc}); pass a dict"
                        " of JSON data (str, numbers, bools, None, lists, dicts)",
                    )
            if p.digest_value is not None:
                value = p.digest_value(key, value)
            body[key] = value
        return name, body

    def spend(self, m: Method, data: Any, kwargs: Mapping[str, Any]) -> None:
        """Report the response's tokens and cost with ``durably.usage``."""
        try:
            ins, outs = m.tokens(data)
        except (KeyError, TypeError, AttributeError, ValueError):
            ins, outs = 0, 0
        counts = {"input": ins, "output": outs}
        for what, n in counts.items():
            if not 0 <= n <= TOKENS_MAX:
                # A server's "unknown" (-1) or garbage: the call was made and paid for,
                # so its result is recorded and the count is left out, not the run failed.
                counts[what] = 0
                model = kwargs.get("model")
                fields = sorted(data.get("usage") or {}) if isinstance(data, dict) else []
                self.warn_once(
                    ("usage", str(model), what),
                    f"{m.step}: a response for model {model!r:.80} reports {n:,} {what}"
                    f" tokens (usage fields {', '.join(fields)}), not a count from 0 to"
                    f" {TOKENS_MAX:,}: counted as 0 in the run's spend and budget",
                )
        ins, outs = counts["input"], counts["output"]
        cost = 0.0
        prices = self.settings.prices
        if prices is not None:
            model = kwargs.get("model")
            found = prices.get(model) if isinstance(model, str) else None
            served = data.get("model") if isinstance(data, dict) else None
            if found is None and isinstance(served, str):
                found = prices.get(served)
            if found is None:
                shown = model if isinstance(model, str) else served
                self.warn_once(
                    ("price", str(shown)),
                    f"wrap(prices=...) has no price for model {shown!r}: its calls cost"
                    " $0 in the run's spend (tokens are still counted); add"
                    f" prices[{shown!r}] = (usd_per_million_input, usd_per_million_output)",
                )
            else:
                cost = min(COST_USD_MAX, ins * found[0] / 1e6 + outs * found[1] / 1e6)
        report_usage(input_tokens=ins, output_tokens=outs, cost_usd=cost)

    def options(self) -> Callable[[Any], Any]:
        """The step options of a recorded call (made once per wrapped client)."""
        if self._options is None:
            self._options = step_options(
                retries=self.settings.retries,
                backoff=0.0,  # the wait is in the call: Retry-After, else exponential
                timeout_s=self.settings.timeout_s,
                retry_on=(*self.provider.retryable, StepTimeout, StreamCut),
            )
        return self._options

    def record_sync(
        self, ctx: Context, m: Method, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        name, body = self.prepare(ctx, m, args, kwargs)
        state = Attempts()

        def call(**_: Any) -> Any:
            time.sleep(state.before_next())
            with provider_errors(self.provider, self.client, state):
                resp = self.target(m.path)(**kwargs)
            data = dump(resp)
            self.spend(m, data, kwargs)
            return data

        data = ctx.step(name, self.options()(call), **body)
        return m.rebuild(data, kwargs)

    def record_stream(
        self,
        ctx: Context | AsyncContext,
        m: Method,
        spec: StreamSpec,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        """A streamed call: the caller's stream object for a sync workflow, an awaitable
        of it for an async one (``await client...create(stream=True)``), except for a
        method that only streams (its manager is returned as it is, not awaited)."""
        name, body = self.prepare(ctx, m, args, kwargs, streaming=True)
        for key in sorted(spec.refused):
            if kwargs.get(key) is not None and not isinstance(kwargs[key], self.provider.sentinels):
                refuse(
                    ctx,
                    name,
                    f"{self.call_name(m)}: {key}= is not recorded by durably in a streamed"
                    " call yet; call it without streaming, or stream inside a plain step"
                    " (ctx.step)",
                )
        kwargs = {k: v for k, v in kwargs.items() if k != "stream"}
        if isinstance(ctx, AsyncContext) and not m.streams_only:
            return _opened(lambda: open_stream(self, ctx, m, spec, name, body, kwargs))
        return open_stream(self, ctx, m, spec, name, body, kwargs)

    async def record_async(
        self, ctx: AsyncContext, m: Method, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        name, body = self.prepare(ctx, m, args, kwargs)
        state = Attempts()

        async def call(**_: Any) -> Any:
            delay = state.before_next()
            if delay:
                await asyncio.sleep(delay)
            with provider_errors(self.provider, self.client, state):
                resp = await self.target(m.path)(**kwargs)
            data = dump(resp)
            self.spend(m, data, kwargs)
            return data

        data = await ctx.step(name, self.options()(call), **body)
        return m.rebuild(data, kwargs)


async def _opened(open_: Callable[[], Any]) -> Any:
    """The stream ``open_()`` makes, once awaited (the client's async
    ``create(stream=True)`` is awaited for its stream; like every awaited call, it takes
    its position when awaited)."""
    return open_()


def dump(resp: Any) -> Any:
    """A response as JSON data (``model_dump(mode="json")``); anything else as it is
    (the step's encoding then names it if it cannot be stored)."""
    model_dump = getattr(resp, "model_dump", None)
    if callable(model_dump):
        # warnings=False: a parsed response's generic field warns about its own type.
        return model_dump(mode="json", warnings=False)
    return resp


def build(cls: Any, data: Any) -> Any:
    """The client's response type ``cls`` rebuilt from recorded JSON ``data`` the way
    the client builds it from the wire (``model_construct``: nested models typed, no
    validation, so a field the provider left out is no error), live and on replay."""
    if not isinstance(data, dict):
        return data
    return cls.model_construct(**data)


class Node:
    """A proxy over one object of a wrapped client's resource tree."""

    __slots__ = ("_durably_path", "_durably_root", "_durably_target")

    def __init__(self, target: Any, path: tuple[str, ...], root: Client) -> None:
        object.__setattr__(self, "_durably_target", target)
        object.__setattr__(self, "_durably_path", path)
        object.__setattr__(self, "_durably_root", root)

    def __getattr__(self, name: str) -> Any:
        target = self._durably_target
        value = getattr(target, name)
        if name.startswith("_"):
            return value
        root: Client = self._durably_root
        path = (*self._durably_path, name)
        m = root.provider.methods.get(path)
        if m is not None:
            return _recorded(root, m, value)
        if path in root.provider.prefixes or _is_resource(root.provider, value):
            return Node(value, path, root)
        if not path[:-1] and name in ("with_options", "copy"):
            return _rewrapping(root, value)
        if callable(value):
            return _passthrough(root, path, value)
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._durably_target, name, value)

    def __repr__(self) -> str:
        return f"<durably-wrapped {self._durably_target!r}>"


class WrappedClient(Node):
    """A wrapped client (what ``wrap`` returns): the client's interface, with its model
    calls recorded as steps inside a workflow. Pass it to steps through a closure, not
    as an argument (it is not data)."""

    __slots__ = ()


def _is_resource(p: Provider, value: Any) -> bool:
    return type(value).__module__.startswith(f"{p.name}.resources")


def _recorded(root: Client, m: Method, bound: Callable[..., Any]) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        ctx = _context()
        if ctx is None:
            return bound(*args, **kwargs)
        if m.stream is not None and (m.streams_only or kwargs.get("stream") is True):
            return root.record_stream(ctx, m, m.stream, args, kwargs)
        if isinstance(ctx, AsyncContext) and root.is_async:
            return root.record_async(ctx, m, args, kwargs)
        if isinstance(ctx, Context) and not root.is_async:
            return root.record_sync(ctx, m, args, kwargs)
        root.prepare(ctx, m, args, kwargs)  # refuses the mix of sync and async
        raise AssertionError("unreachable")  # pragma: no cover

    call.__doc__ = bound.__doc__
    call.__name__ = getattr(bound, "__name__", m.path[-1])
    return call


def _passthrough(root: Client, path: tuple[str, ...], fn: Callable[..., Any]) -> Any:
    def call(*args: Any, **kwargs: Any) -> Any:
        if _context() is not None:
            root.warn_once(
                path,
                f"client.{'.'.join(path)}(...) is not a recorded step: inside a workflow it"
                " runs live again on every replay; make the call inside a step (ctx.step)"
                " to record its result",
            )
        return fn(*args, **kwargs)

    call.__doc__ = fn.__doc__
    return call


def _rewrapping(root: Client, fn: Callable[..., Any]) -> Any:
    def call(*args: Any, **kwargs: Any) -> Any:
        wrapped = wrap_as(root.provider, fn(*args, **kwargs), root.settings)
        wrapped._durably_root._warned = root._warned  # one warning per original client
        return wrapped

    call.__doc__ = fn.__doc__
    return call


def wrap_as(provider: Provider, client: Any, settings: Settings) -> Any:
    """``client`` wrapped for ``provider``; an unknown client type is a ``ConfigError``
    (raised through a step, so the run is blocked, when called in a workflow)."""
    if isinstance(client, WrappedClient):
        client = client._durably_target
    if not isinstance(client, provider.sync_types + provider.async_types):
        message = (
            f"durably.integrations.{provider.name}.wrap takes a {provider.sync_name} or"
            f" {provider.async_name} client, got {type(client).__module__}."
            f"{type(client).__qualname__}; pass the client itself (for another client,"
            " record its calls with ctx.step by hand)"
        )
        ctx = _context()
        if ctx is not None:
            refuse(ctx, f"{provider.name}.wrap", message)
        raise ConfigError(message)
    return WrappedClient(client, (), Client(provider, client, settings))
