"""A tool call as a recorded step: ``pydantic_ai.{name}.tool.{tool}``.

``RecordedToolset`` wraps the run's assembled toolset (the capability's
``get_wrapper_toolset``). Each call is one ``ctx.step`` in its turn's branch (see
``_turns``), its digest the tool's name and arguments: on replay the recorded result
comes back and the tool does not run; after a crash inside it, it runs again under the
same key (at least once, as ``ctx.step`` does), which the tool reads from
``durably.current_step().idempotency_key``. A function that is a ``@durably.tool`` keeps
its kind's rules (an ``effect=True`` step for writes, parking in doubt without a key or
a reconcile; an approval first for destructive tools), through ``Tool.record``.

Pydantic AI's control flow out of a tool (``ModelRetry``, ``ApprovalRequired``,
``CallDeferred``) is recorded as a tagged result, not as a failure, and raised again
outside the step, live and on replay alike.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import TypeAdapter
from pydantic_ai import ApprovalRequired, CallDeferred, ModelRetry, RunContext
from pydantic_ai.messages import ToolReturn
from pydantic_ai.toolsets import AbstractToolset, FunctionToolset, WrapperToolset
from pydantic_ai.toolsets.abstract import ToolsetTool

from ... import AsyncContext, ToolRejected, current_context
from ...tools import Tool as DurablyTool
from .. import refuse
from . import _digest
from ._turns import Turns

_TOOL_RETURN: TypeAdapter[ToolReturn[Any]] = TypeAdapter(ToolReturn[Any])


def _flow(exc: BaseException) -> dict[str, Any]:
    if isinstance(exc, ModelRetry):
        return {"$flow": "retry", "message": exc.message}
    if isinstance(exc, ApprovalRequired):
        return {"$flow": "approval", "metadata": _digest.jsonable(exc.metadata)}
    assert isinstance(exc, CallDeferred)
    return {"$flow": "deferred", "metadata": _digest.jsonable(exc.metadata)}


def _result(value: Any) -> dict[str, Any]:
    """A tool's result as the step records it: JSON data, or a ``ToolReturn`` (a value
    for the model with content and metadata besides) in its own JSON form."""
    if isinstance(value, ToolReturn):
        return {"tool_return": _TOOL_RETURN.dump_python(value, mode="json")}
    return {"value": _digest.jsonable(value)}


def _raise_flow(value: Any) -> Any:
    """The tool's recorded result, or the control-flow exception it raised, again."""
    if not (isinstance(value, dict) and "$flow" in value):
        if isinstance(value, dict) and "tool_return" in value:
            return _TOOL_RETURN.validate_python(value["tool_return"])
        return value["value"] if isinstance(value, dict) and "value" in value else value
    flow = value["$flow"]
    if flow == "retry":
        raise ModelRetry(value["message"])
    if flow == "approval":
        raise ApprovalRequired(metadata=value.get("metadata"))
    raise CallDeferred(metadata=value.get("metadata"))


def durably_tools(toolset: AbstractToolset[Any]) -> dict[str, tuple[DurablyTool, bool]]:
    """The function tools of ``toolset`` whose function is a ``@durably.tool``, by name,
    with whether the function takes Pydantic AI's ``RunContext``."""
    found: dict[str, tuple[DurablyTool, bool]] = {}

    def visit(ts: AbstractToolset[Any]) -> None:
        if isinstance(ts, FunctionToolset):
            for name, t in ts.tools.items():
                if isinstance(t.function, DurablyTool):
                    found[name] = (t.function, t.takes_ctx)

    toolset.apply(visit)
    return found


@dataclass
class RecordedToolset(WrapperToolset[Any]):
    """The run's toolset, its calls recorded as steps of the workflow running the agent."""

    agent_name: str = ""
    turns: Turns | None = None
    kinds: dict[str, tuple[DurablyTool, bool]] = field(default_factory=dict)

    def step_name(self, tool: str) -> str:
        """The step name of ``tool``'s calls."""
        return f"pydantic_ai.{self.agent_name}.tool.{tool}"

    def visit_and_replace(
        self, visitor: Callable[[AbstractToolset[Any]], AbstractToolset[Any]]
    ) -> AbstractToolset[Any]:
        # Already durable: a visitor that wraps leaves must not wrap inside the record.
        return visitor(self)

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        wf = current_context()
        if not isinstance(wf, AsyncContext) or self.turns is None:
            return await self.wrapped.call_tool(name, tool_args, ctx, tool)
        step = self.step_name(name)
        with self.turns.call(ctx.tool_call_id):
            kind = self.kinds.get(name)
            if kind is not None:
                return await self._durably_tool(wf, step, name, kind, tool_args, ctx)
            wrapped = self.wrapped

            async def run(**_: Any) -> Any:
                try:
                    value = await wrapped.call_tool(name, tool_args, ctx, tool)
                except (ModelRetry, ApprovalRequired, CallDeferred) as exc:
                    return _flow(exc)
                return _result(value)

            args = _digest.jsonable(tool_args)
            return _raise_flow(await wf.step(step, run, tool=name, args=args))

    async def _durably_tool(
        self,
        wf: AsyncContext,
        step: str,
        name: str,
        kind: tuple[DurablyTool, bool],
        tool_args: dict[str, Any],
        ctx: RunContext[Any],
    ) -> Any:
        tool, takes_ctx = kind
        if takes_ctx or tool.takes_key:
            refuse(
                wf,
                step,
                f"tool {name!r} is a @durably.tool used by Pydantic AI with"
                f" {'a RunContext' if takes_ctx else 'an idempotency_key'} parameter: Pydantic"
                " AI would ask the model for it. Drop the parameter; read the key from"
                " durably.current_step().idempotency_key inside the tool",
            )
        if tool.approval and ctx.tool_call_approved:
            # Approved already (requires_approval=True on the Pydantic AI side, decided
            # in this call's branch): one person's decision, not two requests.
            return await wf.step(step, tool.step_function, **tool_args)
        try:
            value = await tool.record(wf, step, (), tool_args)
        except ToolRejected as exc:
            # The person's decision goes back to the model as the tool's answer.
            return f"The tool call was denied: {exc}"
        return value
