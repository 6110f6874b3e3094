"""What a recorded model call or tool call is identified by: what the model and the
tool were asked, as JSON, without what LangChain makes up on every run.

LangChain gives each message a fresh ``id`` (``run-...``/``lc_run--...``), each
response ``response_metadata`` (provider ids, timings) and ``usage_metadata``; a model
that names no tool call id gets a generated one. A resumed run builds its messages
again from the record and the agent's own state, so a digest over those values would
raise ``NonDeterminism`` on a fresh random id. They are dropped here at every depth;
what stays is the messages' types, contents, names and tool calls (name and
arguments), the system message, the tools' schemas and the model's settings.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import BaseMessage, messages_to_dict
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic_core import to_jsonable_python

# Keys LangChain generates per run or per call, and bookkeeping that does not change
# what the model is asked.
VOLATILE: frozenset[str] = frozenset(
    {"id", "tool_call_id", "run_id", "response_metadata", "usage_metadata", "lc_run_id"}
)
# Model settings that shape how a request travels, not what it asks; headers may carry
# credentials and are never recorded.
TRANSPORT: frozenset[str] = frozenset(
    {"timeout", "extra_headers", "extra_query", "max_retries", "callbacks"}
)


def jsonable(value: Any) -> Any:
    """``value`` as JSON data (pydantic models, dataclasses, datetimes; bytes as
    base64; anything else as its text)."""
    return to_jsonable_python(value, bytes_mode="base64", serialize_unknown=True)


def strip(value: Any) -> Any:
    """JSON ``value`` without the :data:`VOLATILE` keys, at every depth."""
    if isinstance(value, Mapping):
        return {k: strip(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list | tuple):
        return [strip(v) for v in value]
    return value


def messages(items: Sequence[BaseMessage]) -> list[Any]:
    """``items`` as the digest sees them."""
    return list(strip(jsonable(messages_to_dict(list(items)))))


def _tool(tool: BaseTool | dict[str, Any]) -> Any:
    try:
        return strip(jsonable(convert_to_openai_tool(tool)))
    except Exception:  # a provider's built-in tool dict LangChain passes through as is
        return strip(jsonable(tool))


def model_call(request: Any) -> dict[str, Any]:
    """The step arguments of one ``ModelRequest``: what its digest covers."""
    settings = {k: v for k, v in (request.model_settings or {}).items() if k not in TRANSPORT}
    system = request.system_message
    return {
        "model": model_name(request.model),
        "system": messages([system])[0] if system is not None else None,
        "messages": messages(request.messages),
        "tools": [_tool(t) for t in request.tools],
        "tool_choice": jsonable(request.tool_choice),
        "settings": strip(jsonable(settings)),
    }


def model_name(model: Any) -> str:
    """The model's name as its class gives it (``model_name`` or ``model``), else the
    class's name."""
    for attr in ("model_name", "model"):
        name = getattr(model, attr, None)
        if isinstance(name, str):
            return name
    return type(model).__name__


def tool_call(call: Mapping[str, Any]) -> dict[str, Any]:
    """The step arguments of one tool call: the tool's name and arguments (not its id)."""
    return {"tool": str(call.get("name")), "args": jsonable(call.get("args") or {})}
