"""A tool call as a recorded step: ``langchain.{name}.tool.{tool}``.

The middleware's ``wrap_tool_call`` records ``handler(request)`` (the rest of the chain
and the tool) as one ``ctx.step`` in its turn's branch (``_turns``), its digest the
tool's name and arguments, never the call's generated id. On replay the recorded
``ToolMessage`` comes back (with the current call's id) and the tool does not run;
after a crash inside it, it runs again under the same key (at least once, as
``ctx.step`` does), which the tool reads from ``durably.current_step().idempotency_key``.
A tool whose function is a ``@durably.tool`` keeps its kind's rules (an approval first
for a destructive one, ``effect=True`` for a write) through ``Tool.record``.
``wait_for_approval`` inside a tool asks in the branch (see ``_approval``).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from langchain_core.messages import ToolMessage, messages_from_dict, messages_to_dict
from langgraph.errors import GraphInterrupt

from ... import AsyncContext, Context, Decision, ToolRejected
from ...tools import Tool as DurablyTool
from .. import refuse
from . import _digest
from ._approval import GRANTED, ApprovalAsked, Granted


def durably_tool(ctx: Context | AsyncContext, step: str, request: Any) -> DurablyTool | None:
    """The ``@durably.tool`` behind the call's LangChain tool, if it is one (refused,
    blocking the run, if it takes its key as a parameter: LangChain would ask the model
    for it)."""
    tool = request.tool
    for attr in ("func", "coroutine"):
        fn = getattr(tool, attr, None)
        if isinstance(fn, DurablyTool):
            if fn.takes_key:
                refuse(
                    ctx,
                    step,
                    f"tool {fn.name!r} is a @durably.tool with an idempotency_key parameter"
                    " used as a LangChain tool: LangChain would ask the model for it. Drop"
                    " the parameter; read the key from durably.current_step().idempotency_key"
                    " inside the tool",
                )
            return fn
    return None


def _dump(result: Any, name: str) -> dict[str, Any]:
    if isinstance(result, ToolMessage):
        return {"message": messages_to_dict([result])[0]}
    return {
        "$refused": f"tool {name!r} returned {type(result).__name__}, not a ToolMessage:"
        " durably records a tool's ToolMessage only (a Command changes the graph's state"
        " outside the record). Return the tool's answer, or run this tool without"
        " DurablyMiddleware, then `durably retry` the run"
    }


def _asked(exc: ApprovalAsked) -> dict[str, Any]:
    return {"$ask": {"action": exc.action, "args": exc.data, "timeout_s": exc.timeout_s}}


def _load(value: dict[str, Any], request: Any) -> ToolMessage:
    [message] = messages_from_dict([value["message"]])
    assert isinstance(message, ToolMessage), type(message)
    # The id of the call this run's model turn gave (the same, replayed from its record).
    message.tool_call_id = str(request.tool_call.get("id"))
    return message


def _denied(request: Any, decision: Decision | str) -> ToolMessage:
    text = (
        decision
        if isinstance(decision, str)
        else f"{decision.outcome}" + (f": {decision.note}" if decision.note else "")
    )
    return ToolMessage(
        content=f"The tool call was not approved ({text}).",
        tool_call_id=str(request.tool_call.get("id")),
        name=request.tool_call.get("name"),
        status="error",
    )


def _answer(request: Any, value: Any) -> ToolMessage:
    content = value if isinstance(value, str) else json.dumps(_digest.jsonable(value))
    return ToolMessage(
        content=content,
        tool_call_id=str(request.tool_call.get("id")),
        name=request.tool_call.get("name"),
    )


INTERRUPT = (
    "tool {!r} called LangGraph's interrupt(), which middleware cannot resume (the"
    " checkpointer owns it, and durably records the tool call): call"
    " durably.integrations.langchain.wait_for_approval(...) in the tool instead (or"
    " ctx.wait_for_signal in the workflow), then `durably retry` the run"
)


def _run(
    handler: Callable[[Any], Any],
    request: Any,
    granted: list[Decision],
    live: list[bool],
    **args: Any,
) -> Any:
    """The step function of one tool call: the tool's answer, or what it asks."""
    live.append(True)
    token = GRANTED.set(Granted(granted))
    try:
        return _dump(handler(request), args["tool"])
    except ApprovalAsked as exc:
        return _asked(exc)
    except GraphInterrupt:
        return {"$refused": INTERRUPT.format(args["tool"])}
    finally:
        GRANTED.reset(token)


async def _arun(
    handler: Callable[[Any], Awaitable[Any]],
    request: Any,
    granted: list[Decision],
    live: list[bool],
    **args: Any,
) -> Any:
    """:func:`_run` for async agents."""
    live.append(True)
    token = GRANTED.set(Granted(granted))
    try:
        return _dump(await handler(request), args["tool"])
    except ApprovalAsked as exc:
        return _asked(exc)
    except GraphInterrupt:
        return {"$refused": INTERRUPT.format(args["tool"])}
    finally:
        GRANTED.reset(token)


def record(ctx: Context, step: str, request: Any, handler: Callable[[Any], Any]) -> ToolMessage:
    """The tool call ``handler(request)`` as recorded steps of ``ctx``'s workflow."""
    args = _digest.tool_call(request.tool_call)
    kind = durably_tool(ctx, step, request)
    if kind is not None:
        try:
            value = kind.record(ctx, step, (), dict(request.tool_call.get("args") or {}))
        except ToolRejected as exc:
            return _denied(request, str(exc))
        return _answer(request, value)
    decisions: list[Decision] = []
    while True:
        live: list[bool] = []
        value = ctx.step(step, partial(_run, handler, request, list(decisions), live), **args)
        if "$refused" in value:
            # A call durably cannot record as it is (an interrupt(), a Command), recorded
            # so by this process, blocks the run; one replayed (the code fixed since, the
            # run retried) is followed by the call run again.
            if live:
                refuse(ctx, step, value["$refused"])
            continue
        if "$ask" not in value:
            return _load(value, request)
        ask = value["$ask"]
        decision = ctx.request_approval(ask["action"], ask["args"], timeout_s=ask["timeout_s"])
        if not decision.approved:
            return _denied(request, decision)
        decisions.append(decision)


async def arecord(
    ctx: AsyncContext, step: str, request: Any, handler: Callable[[Any], Awaitable[Any]]
) -> ToolMessage:
    """The tool call ``await handler(request)`` as recorded steps of ``ctx``'s workflow."""
    args = _digest.tool_call(request.tool_call)
    kind = durably_tool(ctx, step, request)
    if kind is not None:
        try:
            value = await kind.record(ctx, step, (), dict(request.tool_call.get("args") or {}))
        except ToolRejected as exc:
            return _denied(request, str(exc))
        return _answer(request, value)
    decisions: list[Decision] = []
    while True:
        live: list[bool] = []
        value = await ctx.step(
            step, partial(_arun, handler, request, list(decisions), live), **args
        )
        if "$refused" in value:
            # A call durably cannot record as it is (an interrupt(), a Command), recorded
            # so by this process, blocks the run; one replayed (the code fixed since, the
            # run retried) is followed by the call run again.
            if live:
                refuse(ctx, step, value["$refused"])
            continue
        if "$ask" not in value:
            return _load(value, request)
        ask = value["$ask"]
        decision = await ctx.request_approval(
            ask["action"], ask["args"], timeout_s=ask["timeout_s"]
        )
        if not decision.approved:
            return _denied(request, decision)
        decisions.append(decision)
