"""``durably.tools.dispatch``: run the tool calls of a model response as recorded steps.

A response is an OpenAI chat completion (``choices[0].message.tool_calls``), an OpenAI
Responses API response (``output`` items of type ``function_call``) or an Anthropic
Message (``content`` blocks of type ``tool_use``): the client's pydantic object or its
``model_dump()`` dict, as the wrapped clients of ``durably.integrations`` return them
live and on replay. What comes back is the list of tool-result messages to append to
the conversation, in the provider's shape, in the order the model listed its calls.

Which calls run is decided from the response alone (recorded by the model call's
step) and the tools' schemas, so a replay runs the same steps at the same positions.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from .. import approvals, codec
from ..context import AsyncContext, Context
from ..errors import ConfigError, SerializationError, StepFailed, ToolRejected
from ._tool import Tool
from .schema import validate

if TYPE_CHECKING:
    from collections.abc import Coroutine

Shape = Literal["openai-chat", "openai-responses", "anthropic"]

ARGUMENTS_DEPTH_MAX = 64
"""Deepest nesting of a model's tool-call arguments (objects and arrays) dispatch passes
on; deeper is a tool error for the model (a step's encoder, and Python's recursion
limit, would otherwise end the run on what the model made up)."""


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call the model asked for: its id, the tool's name and its arguments (the
    decoded JSON object, or the text that did not decode)."""

    id: str
    name: str
    arguments: Any
    bad_json: str | None = None


def _get(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(name, default)
    return getattr(obj, name, default)


def _decode(raw: Any) -> tuple[Any, str | None]:
    if raw is None or raw == "":
        return {}, None
    if isinstance(raw, str):
        try:
            return json.loads(raw), None
        except json.JSONDecodeError as exc:
            return None, f"arguments are not valid JSON ({exc.msg} at character {exc.pos})"
        except RecursionError:
            return None, f"arguments are nested deeper than {ARGUMENTS_DEPTH_MAX} levels"
        except ValueError:  # e.g. a number with more digits than Python converts
            return None, "arguments hold a number too long to read"
    return raw, None


def _too_deep(value: Any) -> bool:
    """Whether ``value`` nests objects/arrays deeper than ARGUMENTS_DEPTH_MAX (iterative:
    no recursion on what the model sent)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth >= ARGUMENTS_DEPTH_MAX:
                return True
            children = item.values() if isinstance(item, dict) else item
            stack.extend((c, depth + 1) for c in children)
    return False


def parse(response: Any) -> tuple[Shape, list[ToolCall]]:
    """The shape of ``response`` and its tool calls, in the order the model listed them."""
    choices = _get(response, "choices")
    if choices is not None:
        if not choices:
            return "openai-chat", []
        message = _get(choices[0], "message")
        calls = []
        for c in _get(message, "tool_calls") or []:
            fn = _get(c, "function")
            args, bad = _decode(_get(fn, "arguments"))
            calls.append(ToolCall(str(_get(c, "id")), str(_get(fn, "name")), args, bad))
        return "openai-chat", calls
    output = _get(response, "output")
    if isinstance(output, Sequence) and not isinstance(output, str | bytes):
        calls = []
        for item in output:
            if _get(item, "type") == "function_call":
                args, bad = _decode(_get(item, "arguments"))
                calls.append(
                    ToolCall(str(_get(item, "call_id")), str(_get(item, "name")), args, bad)
                )
        return "openai-responses", calls
    content = _get(response, "content")
    if isinstance(content, Sequence) and not isinstance(content, str | bytes):
        calls = []
        for block in content:
            if _get(block, "type") == "tool_use":
                args, bad = _decode(_get(block, "input"))
                calls.append(ToolCall(str(_get(block, "id")), str(_get(block, "name")), args, bad))
        return "anthropic", calls
    raise ConfigError(
        "dispatch takes a model response: an OpenAI chat completion (choices), an OpenAI"
        " Responses response (output) or an Anthropic Message (content), as the client"
        f" returns it or its model_dump(); got a {type(response).__name__}"
    )


def _result_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return codec.dumps(value)


def _messages(shape: Shape, results: list[tuple[ToolCall, str, bool]]) -> list[dict[str, Any]]:
    if shape == "openai-chat":
        return [{"role": "tool", "tool_call_id": c.id, "content": text} for c, text, _ in results]
    if shape == "openai-responses":
        return [
            {"type": "function_call_output", "call_id": c.id, "output": text}
            for c, text, _ in results
        ]
    if not results:
        return []
    blocks: list[dict[str, Any]] = []
    for c, text, error in results:
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": c.id, "content": text}
        if error:
            block["is_error"] = True
        blocks.append(block)
    return [{"role": "user", "content": blocks}]


def _index(tools: Iterable[Tool]) -> dict[str, Tool]:
    by_name: dict[str, Tool] = {}
    for t in tools:
        if not isinstance(t, Tool):
            raise ConfigError(
                f"dispatch takes @durably.tool functions; {t!r} is not one (decorate it with"
                " @durably.tool(kind=...))"
            )
        if t.name in by_name and by_name[t.name] is not t:
            raise ConfigError(f"two tools are named {t.name!r}: give one another name=")
        by_name[t.name] = t
    return by_name


def _prepare(call: ToolCall, tools: dict[str, Tool]) -> tuple[Tool, dict[str, Any]] | str:
    """The tool and checked arguments of ``call``, or the error text for the model."""
    tool = tools.get(call.name)
    if tool is None:
        known = ", ".join(sorted(tools)) or "none"
        return f"error: there is no tool named {call.name!r} (the tools are: {known})"
    if call.bad_json is not None:
        return f"error: {call.bad_json}; call {call.name!r} again with a JSON object"
    if _too_deep(call.arguments):
        return (
            f"error: arguments for {call.name!r} are nested deeper than"
            f" {ARGUMENTS_DEPTH_MAX} levels; call it again with flatter arguments"
        )
    try:
        kwargs = validate(tool, call.arguments)
    except ValueError as exc:
        return f"error: invalid arguments for {call.name!r}: {exc}"
    # What the model sent, as the step (and an approval request) will encode it: a
    # value they cannot hold is the model's mistake, told to the model, not a reason to
    # end the run. (What validation made of it is the tool's own: not caught here.)
    try:
        codec.digest(tool.name, [], call.arguments, version=codec.CODEC_VERSION)
        if tool.approval:
            approvals.canonical_args(tool.name, call.arguments)
    except (SerializationError, ConfigError, RecursionError) as exc:
        return f"error: cannot use these arguments for {call.name!r}: {exc}"
    return tool, kwargs


def _failure_text(call: ToolCall, exc: Exception) -> str:
    if isinstance(exc, ToolRejected):
        return f"error: {exc}"
    if isinstance(exc, StepFailed):
        return f"error: tool {call.name!r} failed: {exc.type_name}: {exc.message}"
    raise exc


def dispatch(
    ctx: Context | AsyncContext, response: Any, tools: Iterable[Tool]
) -> list[dict[str, Any]] | Coroutine[Any, Any, list[dict[str, Any]]]:
    """Run every tool call of the model ``response`` as a recorded step and return the
    tool-result messages to append (a sync ``Context``: the list; an ``AsyncContext``:
    an awaitable of it, the calls running concurrently through ``ctx.gather``).

    Each call runs as its tool's step (named by the tool's name; a destructive tool's
    approval first), in the order the model listed them; a sync workflow runs them one
    after another. A call of an unknown tool, arguments that are not JSON or do not fit
    the tool's schema, a tool that finally fails (``StepFailed``) and a rejected
    approval (``ToolRejected``) each become a tool-error message for the model (an
    Anthropic ``tool_result`` with ``is_error``) instead of an exception; a stop of the
    run itself (parking, cancel, budget) goes on as usual. Append the model's own
    message to the conversation first, then these: OpenAI chat gets one ``role:
    "tool"`` message per call, the Responses API one ``function_call_output`` item per
    call, Anthropic one ``user`` message holding every ``tool_result`` block.
    """
    shape, calls = parse(response)
    by_name = _index(tools)
    prepared = [_prepare(c, by_name) for c in calls]
    if isinstance(ctx, AsyncContext):
        return _dispatch_async(ctx, shape, calls, prepared)
    if not isinstance(ctx, Context):
        raise ConfigError(
            f"dispatch takes the workflow's ctx (durably.Context or AsyncContext), got a"
            f" {type(ctx).__name__}"
        )
    results: list[tuple[ToolCall, str, bool]] = []
    for call, prep in zip(calls, prepared, strict=True):
        if isinstance(prep, str):
            results.append((call, prep, True))
            continue
        tool, kwargs = prep
        try:
            value = ctx.step(tool.name, tool, **kwargs)
        except (StepFailed, ToolRejected) as exc:
            results.append((call, _failure_text(call, exc), True))
            continue
        results.append((call, _result_text(value), False))
    return _messages(shape, results)


async def _dispatch_async(
    ctx: AsyncContext,
    shape: Shape,
    calls: list[ToolCall],
    prepared: list[tuple[Tool, dict[str, Any]] | str],
) -> list[dict[str, Any]]:
    runnable = [p for p in prepared if not isinstance(p, str)]
    branches = [ctx.step(tool.name, tool, **kwargs) for tool, kwargs in runnable]
    if len(branches) == 1:
        try:
            done: list[Any] = [await branches[0]]
        except (StepFailed, ToolRejected) as exc:
            done = [exc]
    elif branches:
        done = await ctx.gather(*branches, return_exceptions=True)
    else:
        done = []
    outcomes = iter(done)
    results: list[tuple[ToolCall, str, bool]] = []
    for call, prep in zip(calls, prepared, strict=True):
        if isinstance(prep, str):
            results.append((call, prep, True))
            continue
        value = next(outcomes)
        if isinstance(value, Exception) and isinstance(value, StepFailed | ToolRejected):
            results.append((call, _failure_text(call, value), True))
        elif isinstance(value, BaseException):
            raise value
        else:
            results.append((call, _result_text(value), False))
    return _messages(shape, results)
