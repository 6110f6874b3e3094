"""A LangChain agent in a durably workflow, run as its own process by the tests:
``python -m tests.integration.langchain.agent_app JOURNAL_URL WORLD_DB RUN_ID SCENARIO
[KILL_AT]`` (in the checkout).

The model is a ``BaseChatModel`` of the test's own (``bind_tools`` returns itself); it
counts its calls in the world database, which is also where the tool writes, keyed by
``durably.current_step().idempotency_key`` (the world, the kill points and the command
line are the shared crash harness's: ``tests/integration/crash_harness.py``).
Scenarios:

- ``single``: turn 1 calls ``record_order(item="a")``, turn 2 answers with its result;
- ``parallel``: turn 1 calls ``record_order`` for "a" and "b" at once (LangChain runs
  them on threads of its executor), turn 2 answers with both results;
- ``async``: ``parallel`` in an async workflow (``await agent.ainvoke``: asyncio tasks);
- ``stream``: ``single`` through ``agent.stream(stream_mode="messages")``, the model
  streaming its answer token by token (each a ``model.delta`` for followers);
  ``astream``: the same through ``agent.astream`` in an async workflow;
- ``approval``: turn 1 calls ``refund(amount=30)``, which calls ``wait_for_approval``
  first; the run parks until ``durably approve`` (or reject), then turn 2 answers;
  ``aapproval``: the same in an async workflow (``ainvoke``; LangChain runs the sync
  tool on an executor thread).

``KILL_AT``: ``after-model``, ``after-write`` or ``between`` (``parallel``), as the
harness says. Prints the agent's final answer as JSON.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from typing import Any

from langchain.agents import create_agent
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.tools import tool

import durably
from durably.integrations.langchain import DurablyMiddleware, wait_for_approval

from ..crash_harness import count_model_call, main, tool_writer

# The scenarios run in an async workflow (ainvoke/astream).
ASYNC = frozenset({"async", "astream", "aapproval"})


class ScriptedModel(BaseChatModel):
    """Turn 1 asks for the scenario's tool calls (fresh random ids each time, as a
    provider's are), turn 2 answers with the tools' results; every call is counted."""

    world_db: str
    scenario: str

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        return self

    def _answer(self, messages: list[BaseMessage]) -> AIMessage:
        turn = sum(isinstance(m, AIMessage) for m in messages) + 1
        count_model_call(self.world_db, turn)
        usage = {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}
        if turn == 1:
            if self.scenario in ("parallel", "async"):
                calls = [("record_order", {"item": i}) for i in ("a", "b")]
            elif self.scenario in ("approval", "aapproval"):
                calls = [("refund", {"amount": 30})]
            else:
                calls = [("record_order", {"item": "a"})]
            return AIMessage(
                content="",
                tool_calls=[
                    {"name": n, "args": a, "id": f"call_{os.urandom(4).hex()}"} for n, a in calls
                ],
                usage_metadata=usage,
            )
        results = [str(m.content) for m in messages if isinstance(m, ToolMessage)]
        return AIMessage(content="done: " + "; ".join(results), usage_metadata=usage)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self._answer(messages))])

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        answer = self._answer(messages)
        if answer.tool_calls:
            chunk = AIMessageChunk(
                content="",
                tool_call_chunks=[
                    {"name": c["name"], "args": json.dumps(c["args"]), "id": c["id"], "index": i}
                    for i, c in enumerate(answer.tool_calls)
                ],
                usage_metadata=answer.usage_metadata,
            )
            yield ChatGenerationChunk(message=chunk)
            return
        words = str(answer.content).split(" ")
        for i, word in enumerate(words):
            text = word if i == len(words) - 1 else word + " "
            chunk = AIMessageChunk(content=text)
            if run_manager is not None:
                run_manager.on_llm_new_token(text, chunk=ChatGenerationChunk(message=chunk))
            yield ChatGenerationChunk(message=chunk)
        yield ChatGenerationChunk(
            message=AIMessageChunk(content="", usage_metadata=answer.usage_metadata)
        )


def build(url: str, world_db: str, scenario: str, kill_at: str | None, **options: Any) -> Any:
    """The engine (``options`` are ``durably.Engine``'s) and the scenario's workflow."""
    engine = durably.Engine(url, **options)

    # LangChain runs the two calls of "parallel" on its executor's threads, of "async"
    # as asyncio tasks.
    write = tool_writer(
        engine,
        world_db,
        scenario,
        kill_at,
        parallel=("parallel", "async"),
        recorded_name="langchain.shop.tool.record_order",
    )

    @tool
    def record_order(item: str) -> str:
        """Record an order for ``item``."""
        return write("record_order", item)

    @tool
    def refund(amount: int) -> str:
        """Refund ``amount`` dollars (a person approves first)."""
        wait_for_approval("refund", {"amount": amount})
        return write("refund", str(amount))

    model = ScriptedModel(world_db=world_db, scenario=scenario)
    agent = create_agent(model, [record_order, refund], middleware=[DurablyMiddleware("shop")])

    def final(state: Any) -> str:
        return str(state["messages"][-1].content)

    if scenario in ASYNC:

        @engine.workflow(name="shop")
        async def ashop(ctx: durably.AsyncContext, prompt: str) -> str:
            if scenario == "astream":
                text = ""
                async for message, _meta in agent.astream(
                    {"messages": [("user", prompt)]}, stream_mode="messages"
                ):
                    if isinstance(message, AIMessageChunk | AIMessage) and not message.tool_calls:
                        text += str(message.content)
                return text
            return final(await agent.ainvoke({"messages": [("user", prompt)]}))

        return engine, ashop

    @engine.workflow(name="shop")
    def shop(ctx: durably.Context, prompt: str) -> str:
        if scenario == "stream":
            text = ""
            for message, _meta in agent.stream(
                {"messages": [("user", prompt)]}, stream_mode="messages"
            ):
                if isinstance(message, AIMessageChunk | AIMessage) and not message.tool_calls:
                    text += str(message.content)
            return text
        return final(agent.invoke({"messages": [("user", prompt)]}))

    return engine, shop


if __name__ == "__main__":
    main(build)
