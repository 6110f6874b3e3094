"""A Pydantic AI agent in a durably workflow, run as its own process by the tests:
``agent_app.py JOURNAL_URL WORLD_DB RUN_ID SCENARIO [KILL_AT]``.

The model is Pydantic AI's own ``FunctionModel``; it counts its requests in the world
database (``model_calls``), which is also where the tool writes, keyed by
``durably.current_step().idempotency_key`` (``attempts`` keeps every execution,
``effects`` holds one row per key, as a service that honours keys would). Scenarios:

- ``single``: turn 1 calls ``record_order(item="a")``, turn 2 answers with its result;
- ``parallel``: turn 1 calls ``record_order`` for "a" and "b" at once (Pydantic AI runs
  them concurrently), turn 2 answers with both results;
- ``approval``: turn 1 calls ``refund(amount=30)``, a ``requires_approval=True`` tool;
  the run parks until ``durably approve`` (or reject), then turn 2 answers;
- ``stream``: ``single`` through ``run_stream``, the model streaming both turns in
  fragments (each a ``model.delta`` for followers).

``KILL_AT``: ``after-model`` (SIGKILL at the tool's start: turn 1 is recorded, the
write is not done), ``after-write`` (SIGKILL inside the tool right after its write),
``between`` (``parallel``: the call for "b" waits until the call for "a" is recorded,
then SIGKILLs the process before its own write; the call for "a" waits for "b" to have
started, so the two are in flight at once). Prints the agent's output as JSON.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import sys
import time
from collections.abc import AsyncIterator
from contextlib import closing
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

WAIT_S_MAX = 30.0


def world(path: str) -> sqlite3.Connection:
    w = sqlite3.connect(path, timeout=30, isolation_level=None)
    w.executescript(
        "CREATE TABLE IF NOT EXISTS model_calls (turn INTEGER, pid INTEGER);"
        "CREATE TABLE IF NOT EXISTS attempts (tool TEXT, item TEXT, key TEXT, pid INTEGER);"
        "CREATE TABLE IF NOT EXISTS effects (key TEXT PRIMARY KEY, tool TEXT, item TEXT);"
        "CREATE TABLE IF NOT EXISTS started (item TEXT, pid INTEGER);"
    )
    return w


def build(url: str, world_db: str, scenario: str, kill_at: str | None) -> Any:
    engine = durably.Engine(url)

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        turn = sum(isinstance(m, ModelResponse) for m in messages) + 1
        with closing(world(world_db)) as w:
            w.execute("INSERT INTO model_calls VALUES (?, ?)", (turn, os.getpid()))
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

    def write(tool: str, item: str) -> str:
        info = durably.current_step()
        assert info is not None, "a recorded tool runs inside its step"
        if kill_at == "after-model":
            os.kill(os.getpid(), signal.SIGKILL)
        if scenario == "parallel":
            with closing(world(world_db)) as w:
                w.execute("INSERT INTO started VALUES (?, ?)", (item, os.getpid()))
            if item == "a":  # both calls are in flight at once: Pydantic AI's own tasks
                wait_started(world_db, "b")
        if kill_at == "between" and item == "b":
            wait_recorded(engine, info.run_id, "pydantic_ai.shop.tool.record_order")
            os.kill(os.getpid(), signal.SIGKILL)
        with closing(world(world_db)) as w:
            w.execute(
                "INSERT INTO attempts VALUES (?, ?, ?, ?)",
                (tool, item, info.idempotency_key, os.getpid()),
            )
            w.execute(
                "INSERT INTO effects VALUES (?, ?, ?) ON CONFLICT(key) DO NOTHING",
                (info.idempotency_key, tool, item),
            )
        if kill_at == "after-write":
            os.kill(os.getpid(), signal.SIGKILL)
        return f"{tool} {item} ok"

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
    engine, shop = build(url, world_db, scenario, kill_at)
    try:
        out = asyncio.run(engine.run_async(shop, "order please", run_id=run_id))
        print(json.dumps(out), flush=True)
    finally:
        engine.close()


if __name__ == "__main__":
    main()
