"""Streamed model calls through a wrapped client (``stream=True``, Anthropic's
``messages.stream``): one ``ctx.step_stream`` per call.

Live, the step's function opens the provider's stream (the client's own retries off)
and hands each event to the caller as it arrives; its text and tool-call fragments go
to the run's followers as ``model.delta`` events (the step's ``deltas=``); the usage of
the final event goes into the spend once, before the result is recorded; the assembled
final message is the step's record. On replay the caller iterates a synthetic stream of
the same event types (built with the SDK's own types) from that record, and the
provider is not asked again. A crash mid-stream records nothing: the call runs again.

What a provider knows about its streams is a :class:`StreamSpec`; the objects the
caller holds are :class:`DurableStream` and :class:`AsyncDurableStream`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol

from .. import AsyncContext, AsyncStepStream, Context, StepStream
from ._attempts import Attempts, provider_errors, scrub


class Method(Protocol):
    """What a stream needs to know of its method (``_common.Method``)."""

    @property
    def step(self) -> str: ...


class Client(Protocol):
    """What a stream needs of the wrapped client's root (``_common.Client``)."""

    provider: Any
    client: Any

    def spend(self, m: Any, data: Any, kwargs: Mapping[str, Any]) -> None: ...
    def target(self, path: tuple[str, ...]) -> Any: ...
    def options(self) -> Callable[[Any], Any]: ...


@dataclass(frozen=True, slots=True)
class StreamSpec:
    """How one method's stream is recorded, shown to followers and replayed."""

    # The client method that opens the provider's stream (called with stream=True).
    target: tuple[str, ...]
    # event -> the data of the model.delta events it makes (text, tool-call fragments)
    deltas: Callable[[Any], list[dict[str, Any]]]
    # the events seen so far -> the assembled final message as JSON data (the record)
    assemble: Callable[[list[Any]], Any]
    # (record, the call's keyword arguments) -> the synthetic events of a replay
    replay: Callable[[Any, Mapping[str, Any]], list[Any]]
    # event -> whether it carries the call's final usage (the spend is reported then)
    final: Callable[[Any], bool]
    # the step stream and the call's keyword arguments -> what the caller gets
    present: Callable[[StepStream | AsyncStepStream, Mapping[str, Any]], Any] | None = None
    # Arguments this stream cannot record yet: a call with one is refused (blocked).
    refused: frozenset[str] = frozenset()
    # event -> whether it is one the provider sends only at a stream's end (a finish
    # reason, message_stop, response.completed): a stream that ends without one was cut.
    ending: Callable[[Any], bool] = lambda _: True


class StreamCut(Exception):
    """A provider's stream ended before its final event (the connection closed early):
    what arrived is not a whole message, so it is never recorded. Before any event
    reached the caller the call is retried; after, it is the step's final failure
    (``durably.StepFailed`` naming ``StreamCut``), since an event cannot be taken back."""


StreamCut.__module__ = "durably.integrations"  # its public home (the name errors show)


class DurableStream:
    """A streamed model call of a sync workflow: iterate it as the client's own stream
    (``for event in stream``, ``with stream:``, ``stream.close()``). Live, the events
    arrive as the provider sends them; on replay they are rebuilt from the record."""

    __slots__ = ("_steps",)

    def __init__(self, steps: StepStream) -> None:
        self._steps = steps

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        return next(self._steps)

    def close(self) -> None:
        """Stop early: the provider's stream is closed and what arrived is recorded."""
        self._steps.close()

    def __enter__(self) -> DurableStream:
        return self

    def __exit__(
        self,
        typ: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._steps.__exit__(typ, exc, tb)


class AsyncDurableStream:
    """:class:`DurableStream` for async workflows (``async for``, ``async with``,
    ``await stream.close()``)."""

    __slots__ = ("_steps",)

    def __init__(self, steps: AsyncStepStream) -> None:
        self._steps = steps

    def __aiter__(self) -> AsyncIterator[Any]:
        return self

    async def __anext__(self) -> Any:
        return await self._steps.__anext__()

    async def close(self) -> None:
        """Stop early: the provider's stream is closed and what arrived is recorded."""
        await self._steps.aclose()

    async def __aenter__(self) -> AsyncDurableStream:
        return self

    async def __aexit__(
        self,
        typ: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._steps.__aexit__(typ, exc, tb)


def _metered(root: Client, m: Method, spec: StreamSpec, raw: Any, kwargs: Any) -> Iterator[Any]:
    """The provider's events as they arrive; the final usage reported once (inside the
    pull that brought it, so it is this attempt's spend), its errors scrubbed."""
    seen: list[Any] = []
    reported = ended = False
    try:
        for event in _scrubbed(root, raw):
            seen.append(event)
            ended = ended or spec.ending(event)
            if not reported and spec.final(event):
                root.spend(m, spec.assemble(seen), kwargs)
                reported = True
            yield event
        if not reported:  # no usage event (e.g. no include_usage): the call still counts
            root.spend(m, spec.assemble(seen), kwargs)
            reported = True
        if not ended:
            raise _cut(m, len(seen))
    finally:
        if not reported and seen:  # stopped early or failed mid-stream: still paid for
            _spend_partial(root, m, spec, seen, kwargs)
        close = getattr(raw, "close", None)
        if callable(close):
            close()


def _spend_partial(root: Client, m: Method, spec: StreamSpec, seen: list[Any], kwargs: Any) -> None:
    """The usage of a stream that did not reach its end (the caller stopped early, the
    provider failed mid-stream): what its events carry so far (Anthropic's
    ``message_start`` has the input tokens) counts for this attempt. Never raises: it
    runs while the stream is closed, where an error would hide the reason it was."""
    try:
        root.spend(m, spec.assemble(seen), kwargs)
    except Exception:  # pragma: no cover - a partial message its parser cannot read
        pass


def _cut(m: Method, n: int) -> StreamCut:
    return StreamCut(
        f"{m.step}: the provider's stream ended after {n} event(s) without its final one"
        " (the connection closed early); nothing was recorded"
    )


def _scrubbed(root: Client, raw: Any) -> Iterator[Any]:
    it = iter(raw)
    while True:
        try:
            event = next(it)
        except StopIteration:
            return
        except root.provider.status_error as exc:
            scrub(exc, root.client)
            raise
        yield event


async def _ametered(
    root: Client, m: Method, spec: StreamSpec, raw: Any, kwargs: Any
) -> AsyncIterator[Any]:
    """:func:`_metered` for an async client's stream."""
    seen: list[Any] = []
    reported = ended = False
    it = raw.__aiter__()
    try:
        while True:
            try:
                event = await it.__anext__()
            except StopAsyncIteration:
                break
            except root.provider.status_error as exc:
                scrub(exc, root.client)
                raise
            seen.append(event)
            ended = ended or spec.ending(event)
            if not reported and spec.final(event):
                root.spend(m, spec.assemble(seen), kwargs)
                reported = True
            yield event
        if not reported:
            root.spend(m, spec.assemble(seen), kwargs)
            reported = True
        if not ended:
            raise _cut(m, len(seen))
    finally:
        if not reported and seen:
            _spend_partial(root, m, spec, seen, kwargs)
        close = getattr(raw, "close", None)
        if callable(close):
            await close()


def open_stream(
    root: Client,
    ctx: Context | AsyncContext,
    m: Method,
    spec: StreamSpec,
    name: str,
    body: dict[str, Any],
    kwargs: dict[str, Any],
) -> Any:
    """The streamed call as one ``ctx.step_stream`` (its position taken now, in program
    order), presented to the caller as the client's own stream type would be."""
    state = Attempts()
    call_kwargs = {**kwargs, "stream": True}

    def replay(value: Any) -> list[Any]:
        return spec.replay(value, kwargs)

    if isinstance(ctx, AsyncContext):
        import asyncio

        async def acall(**_: Any) -> Any:
            delay = state.before_next()
            if delay:
                await asyncio.sleep(delay)
            with provider_errors(root.provider, root.client, state):
                raw = await root.target(spec.target)(**call_kwargs)
            return _ametered(root, m, spec, raw, kwargs)

        asteps = ctx.step_stream(
            name,
            root.options()(acall),
            assemble=spec.assemble,
            replay=replay,
            deltas=spec.deltas,
            **body,
        )
        return spec.present(asteps, kwargs) if spec.present else AsyncDurableStream(asteps)

    import time

    def call(**_: Any) -> Any:
        time.sleep(state.before_next())
        with provider_errors(root.provider, root.client, state):
            raw = root.target(spec.target)(**call_kwargs)
        return _metered(root, m, spec, raw, kwargs)

    steps = ctx.step_stream(
        name,
        root.options()(call),
        assemble=spec.assemble,
        replay=replay,
        deltas=spec.deltas,
        **body,
    )
    return spec.present(steps, kwargs) if spec.present else DurableStream(steps)
