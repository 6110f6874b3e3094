"""A Pydantic AI agent in a durably workflow, run as its own process by the tests:
``python -m tests.integration.pydantic_ai.agent_app JOURNAL_URL WORLD_DB RUN_ID SCENARIO
[KILL_AT]`` (in the checkout).

The model is Pydantic AI's own ``FunctionModel``; it counts its requests in the world
database, which is also where the tool writes, keyed by
``durably.current_step().idempotency_key`` (the world, the kill points and the command
line are the shared crash harness's: ``tests/integration/crash_harness.py``). Scenarios:

- ``single``: turn 1 calls ``record_order(item="a")``, turn 2 answers with its result;
- ``parallel``: turn 1 calls ``record_order`` for "a" and "b" at once (Pydantic AI runs
  them concurrently), turn 2 answers with both results;
- ``approval``: turn 1 calls ``refund(amount=30)``, a ``requires_approval=True`` tool;
  the run parks until ``durably approve`` (or reject), then turn 2 answers;
- ``stream``: ``single`` through ``run_stream``, the model streaming both turns in
  fragments (each a ``model.delta`` for followers).

``KILL_AT``: ``after-model``, ``after-write`` or ``between`` (``parallel``), as the
harness says. Prints the agent's output as JSON.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

import durably
from durably.integrations.pydantic_ai import DurableAgent

from ..crash_harness import count_model_call, main, tool_writer


def build(url: str, world_db: str, scenario: str, kill_at: str | None) -> Any:
    engine = durably.Engine(url)

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        turn = sum(isinstance(m, ModelResponse) for m in messages) + 1
        count_model_call(world_db, turn)
        if turn == 1:
            if scenario == "parallel":
                calls = [ToolCallPart("record_order", {"item": i}) for i in ("a", "b")]
            elif scenario == "approval":
                calls = [ToolCallPart("refund", {"amount": 30})]
            else:
                calls = [ToolCallPart("record_order", {"item": "a"})]
            return ModelResponse(parts=calls)
        results = [
            str(p.content)
            for m in messages
            for p in getattr(m, "parts", [])
            if isinstance(p, ToolReturnPart)
        ]
        return ModelResponse(parts=[TextPart("done: " + "; ".join(results))])

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
        response = model(messages, info)
        for part in response.parts:
            if isinstance(part, ToolCallPart):
                args = part.args_as_json_str()
                for cut in (0, len(args) // 2):  # the arguments in two fragments
                    end = len(args) // 2 if cut == 0 else len(args)
                    tool: DeltaToolCalls = {
                        0: DeltaToolCall(part.tool_name if cut == 0 else None, args[cut:end])
                    }
                    yield tool
            elif isinstance(part, TextPart):
                for word in part.content.split(" "):
                    yield word + " "

    agent: Agent[None, str] = Agent(FunctionModel(model, stream_function=stream), name="shop")

    # Pydantic AI runs the two calls of "parallel" as its own concurrent tasks.
    write = tool_writer(
        engine,
        world_db,
        scenario,
        kill_at,
        parallel=("parallel",),
        recorded_name="pydantic_ai.shop.tool.record_order",
    )

    @agent.tool_plain
    def record_order(item: str) -> str:
        """Record an order for ``item`` (a plain def: Pydantic AI runs it in a thread)."""
        return write("record_order", item)

    @agent.tool_plain(requires_approval=True)
    def refund(amount: int) -> str:
        """Refund ``amount`` dollars (a person approves first)."""
        return write("refund", str(amount))

    durable = DurableAgent(agent)

    @engine.workflow(name="shop")
    async def shop(ctx: durably.AsyncContext, prompt: str) -> str:
        if scenario == "stream":
            async with durable.run_stream(prompt) as streamed:
                return await streamed.get_output()
        result = await durable.run(prompt)
        return result.output

    return engine, shop


if __name__ == "__main__":
    main(build)
