"""What a recorded model request or tool call is identified by: the request as the
model was asked it, JSON, without what the framework makes up on every run.

Pydantic AI stamps each message and part with a fresh timestamp, each agent run with a
random ``run_id``/``conversation_id`` and (for models that give none) each tool call
with a generated id. A resumed run builds its messages again, so those values differ
from the crashed run's: a digest over them would raise ``NonDeterminism`` on every
resume. They are dropped here, at every depth; what stays is what the model was asked
(instructions, prompts, earlier responses' parts, tool results, tool definitions,
settings) and what a tool was asked (its name and arguments).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic_core import to_jsonable_python

# Keys the framework generates per run or per call, and bookkeeping that does not
# change what the model is asked (usage, the provider's own response id, attempts).
VOLATILE: frozenset[str] = frozenset(
    {
        "timestamp",
        "run_id",
        "conversation_id",
        "tool_call_id",
        "provider_response_id",
        "id",
        "history_digest",
        "usage",
        "failed_attempts",
        "workspace_ref",
        "provider_details",
        "provider_url",
        "finish_reason",
        "metadata",
    }
)
# Fields whose value is what the model was asked, whole: a tool call's arguments, a
# prompt's or a tool result's content, a tool's or an output's JSON schema. A key
# inside them named like a generated one (a tool's ``id`` parameter, a result's
# ``timestamp``) is the user's data: stripping it would hide a change to it from the
# digest. Their values come from the user's code or the record, so they are stable.
PAYLOAD: frozenset[str] = frozenset(
    {"args", "content", "parameters_json_schema", "json_schema", "return_schema"}
)
# Model settings that shape how a request travels, not what it asks; headers may carry
# credentials and are never recorded (docs/integrations.md).
TRANSPORT: frozenset[str] = frozenset({"timeout", "extra_headers", "extra_query"})


def jsonable(value: Any) -> Any:
    """``value`` as JSON data (pydantic models, dataclasses, datetimes, bytes as base64)."""
    return to_jsonable_python(value, bytes_mode="base64", serialize_unknown=True)


def dumps(value: Any) -> str:
    """``value`` as JSON text (a tool call's arguments given as an object)."""
    return json.dumps(jsonable(value), separators=(",", ":"), ensure_ascii=False)


def strip(value: Any) -> Any:
    """JSON ``value`` without the :data:`VOLATILE` keys, at every depth of the
    framework's structure but not inside a :data:`PAYLOAD` field (recursion depth is
    bounded by the message structure the framework builds)."""
    if isinstance(value, Mapping):
        return {k: v if k in PAYLOAD else strip(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list | tuple):
        return [strip(v) for v in value]
    return value


def model_request(
    model_name: str,
    messages: Sequence[Any],
    settings: Mapping[str, Any] | None,
    parameters: Any,
) -> dict[str, Any]:
    """The step arguments of one model request: what its digest covers."""
    shown = {k: v for k, v in (settings or {}).items() if k not in TRANSPORT}
    return {
        "model": model_name,
        "messages": strip(jsonable(list(messages))),
        "settings": strip(jsonable(shown)),
        "parameters": strip(jsonable(parameters)),
    }
