"""A model call as a recorded step: ``langchain.{name}.model``.

The middleware's ``wrap_model_call`` hands the rest of the chain (inner middleware and
the model) to one ``ctx.step_stream``: its chunks are the model's tokens as LangChain's
callbacks see them (only when the agent is streamed, as LangChain itself decides) and,
last, the response; each token is a ``model.delta`` event for followers of the run. The
record is the response's messages (``messages_to_dict``) with its structured output, so
a recorded turn never reaches the model again: a replay rebuilds the same
``ModelResponse``, message ids included, so the agent's state is what it was. The model
itself is never serialised, only what it was asked (``_digest``) and what it answered.
"""

from __future__ import annotations

import asyncio
import contextvars
import queue
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextvars import ContextVar
from typing import Any

from langchain.agents.middleware import ModelRequest, ModelResponse
from langchain.agents.middleware.types import ExtendedModelResponse
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, messages_from_dict, messages_to_dict
from langchain_core.tracers.context import register_configure_hook
from pydantic import TypeAdapter

from ... import AsyncContext, Context
from ... import usage as report_usage
from . import _digest

# LangChain adds the handler a context variable holds to every callback manager it
# configures below it (its public configure hook): the model's token callbacks reach
# the step that records them, whichever thread or task the model runs on.
_TOKENS: ContextVar[BaseCallbackHandler | None] = ContextVar(
    "durably_langchain_tokens", default=None
)
register_configure_hook(_TOKENS, inheritable=True)


class _Tokens(BaseCallbackHandler):
    """Hands each new token of the model to ``put`` (inline: no executor hop)."""

    run_inline = True

    def __init__(self, put: Callable[[Any], None]) -> None:
        self._put = put

    def on_llm_new_token(self, token: Any, **kwargs: Any) -> None:
        """A text token (a provider's content-block tokens carry no text delta)."""
        if isinstance(token, str) and token:
            self._put(("token", token))


def _messages(result: Any) -> tuple[list[Any], Any]:
    if isinstance(result, ExtendedModelResponse):
        result = result.model_response
    if isinstance(result, AIMessage):
        return [result], None
    return list(result.result), result.structured_response


def _charge(messages: list[Any], price: tuple[float, float] | None) -> None:
    """The response's tokens (and their cost at ``price``, USD per million input and
    output tokens) into the run's spend; called inside the step, so a crash before the
    record still counts them (see ``durably.usage``)."""
    for m in messages:
        u = getattr(m, "usage_metadata", None)
        if u:
            i = max(0, int(u.get("input_tokens") or 0))
            o = max(0, int(u.get("output_tokens") or 0))
            cost = (i * price[0] + o * price[1]) / 1e6 if price else 0.0
            report_usage(input_tokens=i, output_tokens=o, cost_usd=cost)


def _dump(result: Any, price: tuple[float, float] | None) -> dict[str, Any]:
    messages, structured = _messages(result)
    _charge(messages, price)
    return {"result": messages_to_dict(messages), "structured": _digest.jsonable(structured)}


def _load(data: dict[str, Any], request: ModelRequest) -> ModelResponse:
    structured = data.get("structured")
    schema = getattr(request.response_format, "schema", None)
    if structured is not None and isinstance(schema, type):
        # The schema's own type again (a pydantic model, a dataclass, a TypedDict), as
        # LangChain parsed it live; a JSON-schema dict's output is plain data already.
        structured = TypeAdapter(schema).validate_python(structured)
    return ModelResponse(result=messages_from_dict(data["result"]), structured_response=structured)


def _assemble(chunks: list[Any]) -> dict[str, Any]:
    tokens = [c["text"] for c in chunks if "text" in c]
    final = [c["response"] for c in chunks if "response" in c]
    return {"tokens": tokens, "response": final[-1] if final else None}


def _replay(value: Any) -> Iterator[Any]:
    for t in value["tokens"]:
        yield {"text": t}
    if value["response"] is not None:
        yield {"response": value["response"]}


def _deltas(chunk: Any) -> list[dict[str, Any]]:
    """The ``model.delta`` data of one live chunk: its text token, if it is one."""
    return [{"text": chunk["text"]}] if "text" in chunk else []


def _options(ctx: Context | AsyncContext, request: ModelRequest) -> dict[str, Any]:
    """``ctx.step_stream``'s options for the model call ``request``: how its record is
    made and replayed, its deltas for followers and the arguments its digest covers."""
    return {
        "assemble": _assemble,
        "replay": _replay,
        "deltas": _deltas,
        **_digest.model_call(request),
    }


def record(
    ctx: Context,
    step: str,
    request: ModelRequest,
    handler: Callable[[ModelRequest], Any],
    price: tuple[float, float] | None,
) -> ModelResponse:
    """The model call ``handler(request)`` as a recorded step of ``ctx``'s workflow."""

    def stream(**_: Any) -> Iterator[dict[str, Any]]:
        # The chain runs on a thread of its own so that its tokens reach followers while
        # the model still answers; it runs in a copy of this context (LangGraph's config,
        # durably's step), with the token handler set.
        q: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        work_ctx = contextvars.copy_context()

        def work() -> None:
            _TOKENS.set(_Tokens(q.put))
            try:
                q.put(("done", handler(request)))
            except BaseException as exc:  # handed to the step, which records or raises it
                q.put(("error", exc))

        threading.Thread(
            target=work_ctx.run, args=(work,), name="durably-langchain-model", daemon=True
        ).start()
        while True:
            kind, value = q.get()
            if kind == "token":
                yield {"text": value}
            elif kind == "error":
                raise value
            else:
                yield {"response": _dump(value, price)}
                return

    final: Any = None
    with ctx.step_stream(step, stream, **_options(ctx, request)) as chunks:
        for chunk in chunks:
            if "response" in chunk:
                final = chunk["response"]
    if final is None:
        raise RuntimeError(f"{step}: the model call ended without a response")
    return _load(final, request)


async def arecord(
    ctx: AsyncContext,
    step: str,
    request: ModelRequest,
    handler: Callable[[ModelRequest], Awaitable[Any]],
    price: tuple[float, float] | None,
) -> ModelResponse:
    """The model call ``await handler(request)`` as a recorded step of ``ctx``'s
    workflow."""

    async def stream(**_: Any) -> AsyncIterator[dict[str, Any]]:
        loop = asyncio.get_running_loop()
        q: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()

        def put(item: Any) -> None:
            loop.call_soon_threadsafe(q.put_nowait, item)

        token = _TOKENS.set(_Tokens(put))
        try:  # the task copies this context, the token handler with it
            task = asyncio.ensure_future(handler(request))
        finally:
            _TOKENS.reset(token)
        task.add_done_callback(lambda _t: put(("done", None)))
        try:
            while True:
                kind, value = await q.get()
                if kind == "token":
                    yield {"text": value}
                else:
                    break
        finally:
            if not task.done():
                task.cancel()
        yield {"response": _dump(task.result(), price)}

    final: Any = None
    async with ctx.step_stream(step, stream, **_options(ctx, request)) as chunks:
        async for chunk in chunks:
            if "response" in chunk:
                final = chunk["response"]
    if final is None:
        raise RuntimeError(f"{step}: the model call ended without a response")
    return _load(final, request)
