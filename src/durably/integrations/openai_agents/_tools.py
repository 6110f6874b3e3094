"""Function tools as recorded steps: ``on_invoke_tool`` wrapped so that inside a
workflow each call is one ``ctx.step`` named by the tool, whose digest covers the
arguments the model sent (never the call's generated id), in the branch of its turn
that the model's listing gives it; ``needs_approval`` becomes a durably approval
(the run parks until ``durably approve``); a ``@durably.tool`` keeps its kind's rules.

A plain SDK tool is an ordinary step: at least once (after a crash inside it, it runs
again under the same key, which it reads from ``durably.current_step()``), never
parked in doubt. Outside a workflow every tool is the SDK's own, unchanged.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import json
from typing import Any

from agents import FunctionTool
from agents.tool import DEFAULT_APPROVAL_REJECTION_MESSAGE
from agents.tool_context import ToolContext

from ... import AsyncContext, ConfigError, StepFailed, current_context
from ...tools import Tool
from ...tools.schema import validate
from ._turns import Turns

# The attribute of a FunctionTool made by :func:`function_tool`: its durably tool.
DURABLY_TOOL_ATTR = "durably_tool"


def _arguments(raw: str) -> Any:
    """The model's arguments as JSON data (the text itself when it is not JSON)."""
    if not raw:
        return {}
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def _output(value: Any) -> Any:
    """A tool's output as the journal holds it (the SDK accepts the dumped forms of its
    structured outputs: ``{"type": "text", "text": ...}``)."""
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    if isinstance(value, list):
        return [_output(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool | dict):
        return value
    return str(value)  # what the SDK would send the model for it


async def _needs_approval(setting: Any, tctx: ToolContext[Any], args: Any) -> bool:
    if callable(setting):
        params = args if isinstance(args, dict) else {}
        result = setting(tctx, params, tctx.tool_call_id)
        if inspect.isawaitable(result):
            result = await result
        return bool(result)
    return bool(setting)


def wrap_tool(tool: Any, turns: Turns) -> Any:
    """``tool`` with its calls recorded (a ``FunctionTool``); other tools (hosted,
    computer, shell, MCP servers' hosted tools) are returned as they are."""
    if not isinstance(tool, FunctionTool) or getattr(tool, "_durably_wrapped", False):
        return tool
    inner = tool.on_invoke_tool
    approval = tool.needs_approval
    durable = getattr(tool, DURABLY_TOOL_ATTR, None)
    wrapped = copy.copy(tool)
    wrapped.needs_approval = False  # asked through durably inside a workflow (below)

    async def invoke(tctx: ToolContext[Any], arguments: str) -> Any:
        ctx = current_context()
        if not isinstance(ctx, AsyncContext):
            return await inner(tctx, arguments)
        args = _arguments(arguments)
        with turns.branch(tctx.tool_call_id):
            if await _needs_approval(approval, tctx, args):
                decision = await ctx.request_approval(tool.name, args)
                if not decision.approved:
                    return DEFAULT_APPROVAL_REJECTION_MESSAGE
            if isinstance(durable, Tool):
                return await _durable_call(ctx, durable, args)

            async def run(**_: Any) -> Any:
                # The SDK's invoker: its argument parsing and failure handling (an
                # error becomes text for the model) run inside the step.
                return _output(await inner(tctx, arguments))

            return await ctx.step(tool.name, run, arguments=args)

    wrapped.on_invoke_tool = invoke
    object.__setattr__(wrapped, "_durably_wrapped", True)
    return wrapped


async def _durable_call(ctx: AsyncContext, tool: Tool, args: Any) -> Any:
    """A ``@durably.tool`` call inside a workflow: its kind's step (an intent first for
    writes, the key passed as ``idempotency_key``); bad arguments and a final failure
    are a tool error for the model, as ``durably.tools.dispatch`` makes them."""
    try:
        kwargs = validate(tool, args)
    except ValueError as exc:
        return f"error: invalid arguments for {tool.name!r}: {exc}"
    try:
        return _output(await ctx.step(tool.name, tool.step_function, **kwargs))
    except StepFailed as exc:
        return f"error: tool {tool.name!r} failed: {exc.type_name}: {exc.message}"


def function_tool(tool: Tool, **options: Any) -> FunctionTool:
    """An Agents SDK ``FunctionTool`` for the ``@durably.tool`` ``tool``: the model sees
    its name, description and JSON schema (never ``idempotency_key``); inside a
    ``DurableRunner`` run it records as its kind says (an intent for a write, a durably
    approval first for a destructive tool); outside a workflow the SDK runs it, asking
    for its approval the SDK's way (``needs_approval``), and a tool taking
    ``idempotency_key`` gets ``openai-agents:<tool call id>``. ``options`` go to
    ``FunctionTool`` (``timeout_seconds``, ``is_enabled``, ...)."""
    if not isinstance(tool, Tool):
        raise ConfigError(
            "openai_agents.function_tool takes a @durably.tool function; for a plain"
            " function use the SDK's own agents.function_tool"
        )

    async def invoke(tctx: ToolContext[Any], arguments: str) -> Any:
        try:
            kwargs = validate(tool, _arguments(arguments))
        except ValueError as exc:
            return f"error: invalid arguments for {tool.name!r}: {exc}"
        if tool.takes_key:
            kwargs["idempotency_key"] = f"openai-agents:{tctx.tool_call_id}"
        if tool.is_async:
            return _output(await tool.fn(**kwargs))
        return _output(await asyncio.to_thread(tool.fn, **kwargs))

    options.setdefault("needs_approval", tool.approval)
    options.setdefault("strict_json_schema", False)
    made = FunctionTool(
        name=tool.name,
        description=tool.doc,
        params_json_schema=tool.json_schema(),
        on_invoke_tool=invoke,
        **options,
    )
    object.__setattr__(made, DURABLY_TOOL_ATTR, tool)
    return made
