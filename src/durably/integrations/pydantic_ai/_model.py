"""A model request as a recorded step: ``pydantic_ai.{name}.model.request``.

``RecordedModel`` wraps whatever model serves a request (the capability's
``get_wrapper_model`` hands it each one, so a ``FunctionModel`` or ``TestModel``
instance works as well as a provider's): ``request`` is one ``ctx.step`` whose result is
the response as JSON, rebuilt as a ``ModelResponse`` live and on replay, so a recorded
turn never reaches the model again; ``request_stream`` is one ``ctx.step_stream`` whose
chunks are the stream's events (each text or tool-argument fragment a ``model.delta``
for followers of the run) and whose record is the events with the final response. The
model itself is never serialised: only what it was asked (see ``_digest``) and what it
answered.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

from pydantic import TypeAdapter
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelResponse,
    ModelResponseStreamEvent,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    ToolCallPart,
    ToolCallPartDelta,
)
from pydantic_ai.models import (
    CompletedStreamedResponse,
    Model,
    ModelRequestParameters,
    StreamedResponse,
)
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import RunContext

from ... import AsyncContext, current_context
from ... import usage as report_usage
from . import _digest
from ._turns import Turns

_EVENT: TypeAdapter[ModelResponseStreamEvent] = TypeAdapter(ModelResponseStreamEvent)


def dump_response(response: ModelResponse) -> Any:
    """``response`` as JSON data (what the step records)."""
    return ModelMessagesTypeAdapter.dump_python([response], mode="json")[0]


def load_response(data: Any) -> ModelResponse:
    """The ``ModelResponse`` recorded as ``data``."""
    [message] = ModelMessagesTypeAdapter.validate_python([data])
    assert isinstance(message, ModelResponse), type(message)
    return message


def charge(response: ModelResponse) -> None:
    """The response's tokens (and its price, where Pydantic AI knows the model's) into
    the run's spend; called inside the step, so a crash before the record still counts
    it (see ``durably.usage``)."""
    u = response.usage
    cost = 0.0
    with contextlib.suppress(Exception):  # no price known for this model (a test model)
        cost = float(response.cost().total_price)
    report_usage(
        input_tokens=max(0, int(u.input_tokens or 0)),
        output_tokens=max(0, int(u.output_tokens or 0)),
        cost_usd=max(0.0, cost),
    )


def deltas(chunk: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The ``model.delta`` data of one live chunk: a text fragment (``{"text": ...}``)
    or a tool call's argument fragment (``{"tool": part index, "arguments": ...}``)."""
    data = chunk.get("event")
    if data is None:
        return []
    event = _EVENT.validate_python(data)
    if isinstance(event, PartStartEvent):
        part = event.part
        if isinstance(part, TextPart) and part.content:
            return [{"text": part.content}]
        if isinstance(part, ToolCallPart):
            args = part.args
            text = args if isinstance(args, str) else _digest.dumps(args or {})
            return [{"tool": event.index, "name": part.tool_name, "arguments": text}]
    if isinstance(event, PartDeltaEvent):
        delta = event.delta
        if isinstance(delta, TextPartDelta) and delta.content_delta:
            return [{"text": delta.content_delta}]
        if isinstance(delta, ToolCallPartDelta) and delta.args_delta is not None:
            args = delta.args_delta
            text = args if isinstance(args, str) else _digest.dumps(args)
            return [{"tool": event.index, "arguments": text}]
    return []


def _assemble(chunks: list[Any]) -> dict[str, Any]:
    events = [c["event"] for c in chunks if "event" in c]
    final = [c["response"] for c in chunks if "response" in c]
    return {"events": events, "response": final[-1] if final else None}


def _replay(value: Any) -> Iterable[Any]:
    for e in value["events"]:
        yield {"event": e}
    if value["response"] is not None:
        yield {"response": value["response"]}


class RecordedModel(WrapperModel):
    """A model whose requests are recorded steps of the workflow that runs the agent."""

    def __init__(self, wrapped: Model, *, agent_name: str, turns: Turns) -> None:
        super().__init__(wrapped)
        self._agent = agent_name
        self._turns = turns

    @property
    def step(self) -> str:
        """The step name of this model's requests."""
        return f"pydantic_ai.{self._agent}.model.request"

    def _ctx(self) -> AsyncContext | None:
        ctx = current_context()
        return ctx if isinstance(ctx, AsyncContext) else None

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        ctx = self._ctx()
        if ctx is None:  # inside a step (a tool that runs an agent): the step records
            return await self.wrapped.request(messages, model_settings, model_request_parameters)
        wrapped = self.wrapped

        async def ask(**_: Any) -> Any:
            response = await wrapped.request(messages, model_settings, model_request_parameters)
            charge(response)
            return dump_response(response)

        inputs = _digest.model_request(
            wrapped.model_name, messages, model_settings, model_request_parameters
        )
        response = load_response(await ctx.step(self.step, ask, **inputs))
        self._turns.model_answered(response)
        return response

    @contextlib.asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncIterator[StreamedResponse]:
        ctx = self._ctx()
        if ctx is None:
            async with self.wrapped.request_stream(
                messages, model_settings, model_request_parameters, run_context
            ) as live:
                yield live
            return
        wrapped = self.wrapped

        async def stream(**_: Any) -> AsyncIterator[dict[str, Any]]:
            async with wrapped.request_stream(
                messages, model_settings, model_request_parameters, run_context
            ) as live:
                async for event in live:
                    yield {"event": _EVENT.dump_python(event, mode="json")}
                response = live.get()
            charge(response)
            yield {"response": dump_response(response)}

        inputs = _digest.model_request(
            wrapped.model_name, messages, model_settings, model_request_parameters
        )
        events: list[ModelResponseStreamEvent] = []
        final: Any = None
        # The stream is consumed inside the step (its deltas reach followers live) and
        # handed to Pydantic AI once recorded, the way its bundled engines do: the
        # agent's own consumer sees the same events live and on replay.
        async with ctx.step_stream(
            self.step,
            stream,
            assemble=_assemble,
            replay=_replay,
            deltas=deltas,
            **inputs,
        ) as chunks:
            async for chunk in chunks:
                if "event" in chunk:
                    events.append(_EVENT.validate_python(chunk["event"]))
                else:
                    final = chunk["response"]
        if final is None:
            raise RuntimeError(f"{self.step}: the model's stream ended without a response")
        response = load_response(final)
        self._turns.model_answered(response)
        yield CompletedStreamedResponse(
            response, model_request_parameters=model_request_parameters, replay_events=events
        )
