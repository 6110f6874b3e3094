"""The recorded view of an agent graph for one ``DurableRunner`` run: each agent a
clone whose own ``Model`` instance is recorded, whose tools (its function tools and its
MCP servers' tools, as the SDK lists them each turn) record their calls, and whose
handoffs lead to the recorded view of their target. The user's agents are not changed."""

from __future__ import annotations

import dataclasses
from typing import Any

from agents import Agent, Handoff, Model, RunContextWrapper

from ._model import durable_model
from ._tools import wrap_tool
from ._turns import Turns


class Views:
    """The recorded clones of one run's agents, made on first use (handoff cycles end
    at the clone already made)."""

    def __init__(self, turns: Turns) -> None:
        self.turns = turns
        # id(original) -> (original, clone): the original is held so its id stays its own.
        self._made: dict[int, tuple[Any, Any]] = {}

    def agent(self, agent: Agent[Any]) -> Agent[Any]:
        """The recorded clone of ``agent``."""
        found = self._made.get(id(agent))
        if found is not None:
            clone: Agent[Any] = found[1]
            return clone
        clone = agent.clone()
        self._made[id(agent)] = (agent, clone)
        if isinstance(agent.model, Model):
            clone.model = durable_model(agent.model, self.turns)
        clone.handoffs = [self._handoff(h) for h in agent.handoffs]
        turns = self.turns

        async def get_all_tools(run_context: RunContextWrapper[Any]) -> list[Any]:
            tools = await Agent.get_all_tools(clone, run_context)
            return [wrap_tool(t, turns) for t in tools]

        # An instance attribute over the method: the SDK asks the agent for its tools
        # each turn (MCP servers' tools included), and gets them recorded.
        object.__setattr__(clone, "get_all_tools", get_all_tools)
        return clone

    def _handoff(self, target: Any) -> Any:
        if isinstance(target, Agent):
            return self.agent(target)
        if not isinstance(target, Handoff):
            return target
        invoke = target.on_invoke_handoff

        async def on_invoke_handoff(ctx: RunContextWrapper[Any], arguments: str) -> Any:
            chosen = await invoke(ctx, arguments)
            return self.agent(chosen) if isinstance(chosen, Agent) else chosen

        return dataclasses.replace(target, on_invoke_handoff=on_invoke_handoff)
