"""The capability a ``DurableAgent`` adds to each run it makes inside a workflow.

It sits innermost (every other capability's hooks apply around the durable unit, as
Pydantic AI's bundled engines place themselves) and binds the run to the workflow:

- ``get_wrapper_model``: every model that serves a request becomes a ``RecordedModel``;
- ``get_wrapper_toolset``: the run's toolset becomes a ``RecordedToolset``;
- ``handle_deferred_tool_calls``: a call of a ``requires_approval=True`` tool (or one
  that raised ``ApprovalRequired``) parks the run as a durably approval bound to the
  tool's step name and arguments (``durably approve`` decides it); approved, the tool
  runs once; rejected, the model gets the denial. The decision is recorded, so a
  replay answers it again without asking. Externally executed calls (``CallDeferred``)
  are left to the agent's ``DeferredToolRequests`` output, as without durably.
"""

from __future__ import annotations

from typing import Any

from pydantic_ai import (
    DeferredToolRequests,
    DeferredToolResults,
    RunContext,
    ToolApproved,
    ToolDenied,
)
from pydantic_ai.capabilities import AbstractCapability, CapabilityOrdering
from pydantic_ai.models import Model
from pydantic_ai.toolsets import AbstractToolset

from ... import AsyncContext
from . import _digest
from ._model import RecordedModel
from ._toolset import RecordedToolset, durably_tools
from ._turns import Turns


class DurablyCapability(AbstractCapability[Any]):
    """Records one agent run's model requests and tool calls in the workflow ``ctx``."""

    def __init__(self, agent_name: str, ctx: AsyncContext) -> None:
        self.agent_name = agent_name
        self.turns = Turns(ctx)

    def get_ordering(self) -> CapabilityOrdering | None:
        return CapabilityOrdering(position="innermost")

    def get_wrapper_model(self, model: Model) -> Model | None:
        if isinstance(model, RecordedModel):
            return None
        return RecordedModel(model, agent_name=self.agent_name, turns=self.turns)

    def get_wrapper_toolset(self, toolset: AbstractToolset[Any]) -> AbstractToolset[Any] | None:
        return RecordedToolset(
            toolset, agent_name=self.agent_name, turns=self.turns, kinds=durably_tools(toolset)
        )

    async def handle_deferred_tool_calls(
        self, ctx: RunContext[Any], *, requests: DeferredToolRequests
    ) -> DeferredToolResults | None:
        if not requests.approvals:
            return None
        wf = self.turns.ctx
        approvals: dict[str, bool | ToolApproved | ToolDenied] = {}
        answered: dict[str, str] = {}
        for call in requests.approvals:
            action = f"pydantic_ai.{self.agent_name}.tool.{call.tool_name}"
            with self.turns.call(call.tool_call_id):
                decision = await wf.request_approval(action, _digest.jsonable(call.args_as_dict()))
            if decision.approved:
                approvals[call.tool_call_id] = True
            else:
                why = f"The tool call was {decision.outcome}"
                if decision.by:
                    why += f" by {decision.by}"
                if decision.note:
                    why += f": {decision.note}"
                approvals[call.tool_call_id] = ToolDenied(why)
            if decision.by:
                answered[call.tool_call_id] = decision.by
        return DeferredToolResults(approvals=approvals, answered_by=answered)
