"""A LangChain agent in a durably workflow, run as its own process by the tests:
``agent_app.py JOURNAL_URL WORLD_DB RUN_ID SCENARIO [KILL_AT]``.

The model is a ``BaseChatModel`` of the test's own (``bind_tools`` returns itself); it
counts its calls in the world database (``model_calls``), which is also where the tool
writes, keyed by ``durably.current_step().idempotency_key`` (``attempts`` keeps every
execution, ``effects`` one row per key, as a service that honours keys would).
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

``KILL_AT``: ``after-model`` (SIGKILL at the tool's start: turn 1 is recorded, the
write is not done), ``after-write`` (SIGKILL inside the tool right after its write),
``between`` (``parallel``: the call for "b" waits until the call for "a" is recorded,
then SIGKILLs the process before its own write; "a" waits for "b" to have started, so
the two are in flight at once). Prints the agent's final answer as JSON.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import closing
from typing import Any

from langchain.agents import create_agent
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.tools import tool

import durably
from durably.integrations.langchain import DurablyMiddleware, wait_for_approval

WAIT_S_MAX = 30.0
# The scenarios run in an async workflow (ainvoke/astream).
ASYNC = frozenset({"async", "astream", "aapproval"})


def world(path: str) -> sqlite3.Connection:
    w = sqlite3.connect(path, timeout=30, isolation_level=None)
    w.executescript(
        "CREATE TABLE IF NOT EXISTS model_calls (turn INTEGER, pid INTEGER);"
        "CREATE TABLE IF NOT EXISTS attempts (tool TEXT, item TEXT, key TEXT, pid INTEGER);"
        "CREATE TABLE IF NOT EXISTS effects (key TEXT PRIMARY KEY, tool TEXT, item TEXT);"
        "CREATE TABLE IF NOT EXISTS started (item TEXT, pid INTEGER);"
    )
    return w


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
        with closing(world(self.world_db)) as w:
            w.execute("INSERT INTO model_calls VALUES (?, ?)", (turn, os.getpid()))
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

    def write(name: str, item: str) -> str:
        info = durably.current_step()
        assert info is not None, "a recorded tool runs inside its step"
        if kill_at == "after-model":
            os.kill(os.getpid(), signal.SIGKILL)
        if scenario in ("parallel", "async"):
            with closing(world(world_db)) as w:
                w.execute("INSERT INTO started VALUES (?, ?)", (item, os.getpid()))
            if item == "a":  # both calls are in flight at once: LangChain's own threads
                wait_started(world_db, "b")
        if kill_at == "between" and item == "b":
            wait_recorded(engine, info.run_id, "langchain.shop.tool.record_order")
            os.kill(os.getpid(), signal.SIGKILL)
        with closing(world(world_db)) as w:
            w.execute(
                "INSERT INTO attempts VALUES (?, ?, ?, ?)",
                (name, item, info.idempotency_key, os.getpid()),
            )
            w.execute(
                "INSERT INTO effects VALUES (?, ?, ?) ON CONFLICT(key) DO NOTHING",
                (info.idempotency_key, name, item),
            )
        if kill_at == "after-write":
            os.kill(os.getpid(), signal.SIGKILL)
        return f"{name} {item} ok"

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


def wait_started(world_db: str, item: str) -> None:
    """Until the tool call for ``item`` has started in this process."""
    deadline = time.monotonic() + WAIT_S_MAX
    while time.monotonic() < deadline:
        with closing(world(world_db)) as w:
            if w.execute(
                "SELECT 1 FROM started WHERE item = ? AND pid = ?", (item, os.getpid())
            ).fetchone():
                return
        time.sleep(0.01)
    raise TimeoutError(f"the call for {item!r} never started while the other ran")


def wait_recorded(engine: durably.Engine, run_id: str, name: str) -> None:
    """Until a step named ``name`` has its result recorded (a committed event)."""
    deadline = time.monotonic() + WAIT_S_MAX
    while time.monotonic() < deadline:
        page = engine.events(run_id)
        if any(e.kind == "step.completed" and e.data.get("name") == name for e in page.events):
            return
        time.sleep(0.01)
    raise TimeoutError(f"{name} was never recorded")


def main() -> None:
    url, world_db, run_id, scenario = sys.argv[1:5]
    kill_at = sys.argv[5] if len(sys.argv) > 5 else None
    engine, wf = build(url, world_db, scenario, kill_at)
    try:
        if scenario in ASYNC:
            out = asyncio.run(engine.run_async(wf, "order please", run_id=run_id))
        else:
            out = engine.run(wf, "order please", run_id=run_id)
        print(json.dumps(out), flush=True)
    finally:
        engine.close()


if __name__ == "__main__":
    main()
