"""The recorded model: a ``ModelProvider``/``Model`` pair around the SDK's own, whose
``get_response`` (``Runner.run``) and ``stream_response`` (``Runner.run_streamed``) are
one durably step each inside a workflow, and the inner model's calls everywhere else."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from agents import Model, ModelProvider, ModelResponse, ModelSettings, ModelTracing

from ... import AsyncContext, current_context
from ... import usage as report_usage
from .._attempts import scrub
from .._openai_streams import responses_deltas
from . import _wire
from ._turns import Turns

STEP_GET = "openai_agents.model"
STEP_STREAM = "openai_agents.model.stream"


def _report(input_tokens: int, output_tokens: int) -> None:
    report_usage(input_tokens=max(0, input_tokens), output_tokens=max(0, output_tokens))


class DurableModel(Model):
    """A ``Model`` whose turns are recorded steps inside a durably workflow (the digest:
    see :func:`_wire.request_body`), with the response's tokens in the run's spend.
    Outside a workflow, and inside a running step, it is the inner model."""

    def __init__(self, inner: Model, name: str, turns: Turns) -> None:
        self.inner = inner
        self.name = name
        self.turns = turns

    def _body(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        (system_instructions, input, model_settings, tools, output_schema, handoffs, _) = args
        return _wire.request_body(
            model=self.name,
            system_instructions=system_instructions,
            input=input,
            model_settings=model_settings,
            tools=tools,
            output_schema=output_schema,
            handoffs=handoffs,
            previous_response_id=kwargs.get("previous_response_id"),
            conversation_id=kwargs.get("conversation_id"),
            prompt=kwargs.get("prompt"),
        )

    async def get_response(
        self,
        system_instructions: str | None,
        input: Any,
        model_settings: ModelSettings,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: Any,
    ) -> ModelResponse:
        """The model's response: recorded once, replayed after a crash."""
        args = (system_instructions, input, model_settings, tools, output_schema, handoffs, tracing)
        kwargs: dict[str, Any] = {
            "previous_response_id": previous_response_id,
            "conversation_id": conversation_id,
            "prompt": prompt,
        }
        ctx = current_context()
        if not isinstance(ctx, AsyncContext):
            return await self.inner.get_response(*args, **kwargs)

        async def call(**_: Any) -> dict[str, Any]:
            try:
                response = await self.inner.get_response(*args, **kwargs)
            except Exception as exc:
                scrub(exc, None)  # its message is recorded: no credential in it
                raise
            _report(response.usage.input_tokens, response.usage.output_tokens)
            return _wire.dump_response(response)

        data: dict[str, Any] = await ctx.step(STEP_GET, call, **self._body(args, kwargs))
        response = _wire.load_response(data)
        self.turns.saw(response.output)
        return response

    async def stream_response(
        self,
        system_instructions: str | None,
        input: Any,
        model_settings: ModelSettings,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: Any,
    ) -> AsyncIterator[Any]:
        """The model's stream events, live as they arrive (each text or tool-argument
        fragment also a ``model.delta`` event of the run, through the store's stream
        writer, as the wrapped ``openai`` client's ``responses.create(stream=True)``
        makes them); recorded once, when the stream ends, as its finished items and
        terminal event, which a replay streams back (making no deltas)."""
        args = (system_instructions, input, model_settings, tools, output_schema, handoffs, tracing)
        kwargs: dict[str, Any] = {
            "previous_response_id": previous_response_id,
            "conversation_id": conversation_id,
            "prompt": prompt,
        }
        ctx = current_context()
        if not isinstance(ctx, AsyncContext):
            async for event in self.inner.stream_response(*args, **kwargs):
                yield event
            return

        async def events(**_: Any) -> AsyncIterator[Any]:
            seen: list[Any] = []
            try:
                async for event in self.inner.stream_response(*args, **kwargs):
                    seen.append(event)
                    yield event
            except Exception as exc:
                scrub(exc, None)
                raise
            finally:
                _report(*_wire.usage_of_stream(seen))

        stream = ctx.step_stream(
            STEP_STREAM,
            events,
            assemble=_wire.assemble_stream,
            replay=_wire.replay_stream,
            deltas=responses_deltas,
            **self._body(args, kwargs),
        )
        async with stream:
            async for event in stream:
                yield event
        self.turns.saw(_wire.response_of_stream(stream.result))

    def get_retry_advice(self, request: Any) -> Any:
        """The inner model's retry advice (the SDK's retries of a failed turn)."""
        return self.inner.get_retry_advice(request)

    async def close(self) -> None:
        """Close the inner model."""
        await self.inner.close()


class DurableModelProvider(ModelProvider):
    """A ``ModelProvider`` whose models are :class:`DurableModel` around the inner
    provider's (one per model name, for one run)."""

    def __init__(self, inner: ModelProvider, turns: Turns) -> None:
        self.inner = inner
        self.turns = turns
        self._models: dict[str | None, DurableModel] = {}

    def get_model(self, model_name: str | None) -> Model:
        """The recorded model of ``model_name`` (the inner provider resolves the name)."""
        found = self._models.get(model_name)
        if found is None:
            inner = self.inner.get_model(model_name)
            found = DurableModel(inner, model_name or type(inner).__name__, self.turns)
            self._models[model_name] = found
        return found

    async def aclose(self) -> None:
        """Release the inner provider's resources."""
        await self.inner.aclose()


def durable_model(model: Model, turns: Turns) -> DurableModel:
    """``model`` (an agent's or the run config's own instance) recorded."""
    if isinstance(model, DurableModel):
        return model
    name = getattr(model, "model", None)
    return DurableModel(model, str(name) if name else type(model).__name__, turns)
