"""What a model turn of the Agents SDK looks like in the journal: the request a digest
covers, and the response (or a stream's end) as JSON, rebuilt as the SDK's own types.

Pure helpers, no durably context: the recorded model (``_model.py``) builds its step
from them. The digest covers what the model was asked (instructions, input items,
settings, tools, output schema, handoffs, conversation references, prompt), never what
the SDK generates for itself on each run (item ``id`` fields, timestamps, the tracing
switch), so a resume replays instead of raising ``NonDeterminism`` over a fresh value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agents import ModelResponse, ModelSettings
from agents.usage import deserialize_usage, serialize_usage
from openai import BaseModel as OpenAIModel
from openai.types.responses import (
    ResponseCompletedEvent,
    ResponseFailedEvent,
    ResponseIncompleteEvent,
    ResponseOutputItemDoneEvent,
    ResponseStreamEvent,
)
from pydantic import BaseModel, TypeAdapter

# Keys of an input item the SDK or a provider generates per run (an item's own id, a
# timestamp): left out of the digest. ``call_id`` stays: it pairs a tool's output with
# the model's call, and it comes from a recorded response.
GENERATED_KEYS: frozenset[str] = frozenset({"id", "created_at", "created"})

_STREAM_EVENT: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)

# The terminal events of a Responses stream: the SDK builds its ModelResponse from the
# completed one and raises on the others.
TERMINAL_EVENTS: frozenset[str] = frozenset(
    {"response.completed", "response.incomplete", "response.failed", "error", "response.error"}
)


# The client builds what it receives without validation (``construct``: a server may
# leave out a field its type requires, such as a token count), so a replay rebuilds the
# record the same way: what was accepted live is accepted again.
_TERMINAL_TYPES: dict[str, type[OpenAIModel]] = {
    "response.completed": ResponseCompletedEvent,
    "response.incomplete": ResponseIncompleteEvent,
    "response.failed": ResponseFailedEvent,
}


def plain(value: Any) -> Any:
    """``value`` as JSON data: pydantic models dumped, mappings and sequences walked."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_none=True)
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return [plain(v) for v in value]
    return value


def _without_generated(item: Any) -> Any:
    if isinstance(item, dict):
        # A None field and an absent one ask the model the same (a client leaves unset
        # fields out of the items it sends back).
        return {k: v for k, v in item.items() if k not in GENERATED_KEYS and v is not None}
    return item


def input_for_digest(input: str | list[Any]) -> Any:
    """The model's input as the digest sees it: the text, or the items without their
    generated ``id``/timestamp keys."""
    if isinstance(input, str):
        return input
    return [_without_generated(plain(item)) for item in input]


def tool_for_digest(tool: Any) -> dict[str, Any]:
    """A tool as the model sees it: its kind, name, description and parameter schema."""
    out: dict[str, Any] = {"type": type(tool).__name__, "name": getattr(tool, "name", None)}
    for attr in ("description", "params_json_schema", "strict_json_schema"):
        if hasattr(tool, attr):
            out[attr] = plain(getattr(tool, attr))
    return out


def handoff_for_digest(handoff: Any) -> dict[str, Any]:
    """A handoff as the model sees it: a tool name, description and input schema."""
    return {
        "tool_name": handoff.tool_name,
        "description": handoff.tool_description,
        "input_json_schema": plain(handoff.input_json_schema),
        "agent_name": handoff.agent_name,
    }


# Model settings that shape how a request travels, not what it asks: out of the digest
# (a changed timeout is not a changed call) and never recorded (headers and a query may
# carry credentials), as for the wrapped clients.
TRANSPORT_SETTINGS: frozenset[str] = frozenset(
    {"extra_headers", "extra_query", "timeout", "retry", "preserve_raw_usage"}
)


def settings_for_digest(settings: ModelSettings) -> dict[str, Any]:
    """The model settings that shape the request (unset and transport ones left out)."""
    data = settings.to_json_dict()
    return {k: v for k, v in data.items() if v is not None and k not in TRANSPORT_SETTINGS}


def schema_for_digest(output_schema: Any) -> Any:
    """The output type's JSON schema (None: plain text)."""
    if output_schema is None or output_schema.is_plain_text():
        return None
    return {"name": output_schema.name(), "schema": plain(output_schema.json_schema())}


def request_body(
    *,
    model: str,
    system_instructions: str | None,
    input: str | list[Any],
    model_settings: ModelSettings,
    tools: list[Any],
    output_schema: Any,
    handoffs: list[Any],
    previous_response_id: str | None,
    conversation_id: str | None,
    prompt: Any,
) -> dict[str, Any]:
    """The step arguments of one model turn: what its digest covers."""
    body: dict[str, Any] = {
        "model": model,
        "instructions": system_instructions,
        "input": input_for_digest(input),
        "settings": settings_for_digest(model_settings),
        "tools": [tool_for_digest(t) for t in tools],
        "output_schema": schema_for_digest(output_schema),
        "handoffs": [handoff_for_digest(h) for h in handoffs],
    }
    if previous_response_id is not None:
        body["previous_response_id"] = previous_response_id
    if conversation_id is not None:
        body["conversation_id"] = conversation_id
    if prompt is not None:
        body["prompt"] = plain(prompt)
    return body


def dump_response(response: ModelResponse) -> dict[str, Any]:
    """A ``ModelResponse`` as JSON (its output items, usage and ids). Items keep only
    the fields that were set (``exclude_unset``), so an item rebuilt from the record
    is sent back to the model as the live one is (the SDK dumps items the same way)."""
    return {
        "output": [item.model_dump(mode="json", exclude_unset=True) for item in response.output],
        "usage": serialize_usage(response.usage),
        "response_id": response.response_id,
        "request_id": response.request_id,
        "raw_usage": response.raw_usage,
    }


def output_items(items: list[Any]) -> list[Any]:
    """Output items rebuilt from their JSON as the client builds them (each by its
    ``type``, without validation)."""
    return [
        ResponseOutputItemDoneEvent.construct(item=item, output_index=0, sequence_number=0).item
        for item in items
    ]


def load_response(data: Mapping[str, Any]) -> ModelResponse:
    """The ``ModelResponse`` :func:`dump_response` recorded."""
    return ModelResponse(
        output=output_items(data["output"]),
        usage=deserialize_usage(data["usage"]),
        response_id=data.get("response_id"),
        request_id=data.get("request_id"),
        raw_usage=data.get("raw_usage"),
    )


def assemble_stream(events: list[Any]) -> dict[str, Any]:
    """What a streamed turn records: the finished output items (``output_item.done``)
    and the terminal event, as JSON; the deltas went to the caller and followers."""
    done = [
        e.item.model_dump(mode="json", exclude_unset=True)
        for e in events
        if e.type == "response.output_item.done"
    ]
    terminal = next((e for e in reversed(events) if e.type in TERMINAL_EVENTS), None)
    return {
        "done_items": done,
        "terminal": None
        if terminal is None
        else terminal.model_dump(mode="json", exclude_unset=True),
    }


def replay_stream(data: Mapping[str, Any]) -> list[Any]:
    """The synthetic stream a replayed turn hands the SDK: one ``output_item.done``
    event per recorded item, then the terminal event (what the SDK builds its
    ``ModelResponse`` from)."""
    events: list[Any] = [
        ResponseOutputItemDoneEvent.construct(
            type="response.output_item.done", item=item, output_index=n, sequence_number=n
        )
        for n, item in enumerate(data["done_items"])
    ]
    terminal = data["terminal"]
    if terminal is not None:
        kind = _TERMINAL_TYPES.get(terminal.get("type"))
        events.append(
            kind.construct(**terminal) if kind else _STREAM_EVENT.validate_python(terminal)
        )
    return events


def response_of_stream(data: Mapping[str, Any]) -> list[Any]:
    """The output items of a recorded streamed turn, as the SDK resolves them (the
    terminal response's, else the ``done`` items)."""
    terminal = data.get("terminal") or {}
    response = terminal.get("response") or {}
    return output_items(response.get("output") or data["done_items"])


def usage_of_stream(events: list[Any]) -> tuple[int, int]:
    """Input and output tokens of a stream's completed response (0, 0 when it has none)."""
    for e in reversed(events):
        if e.type == "response.completed" and e.response.usage is not None:
            u = e.response.usage
            return int(u.input_tokens or 0), int(u.output_tokens or 0)
    return 0, 0
