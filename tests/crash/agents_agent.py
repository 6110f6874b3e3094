"""An OpenAI Agents SDK agent under ``DurableRunner``, run in a subprocess for the crash
tests of ``durably.integrations.openai_agents``.

Usage: ``python agents_agent.py JOURNAL_URL WORLD_DB RUN_ID --base-url URL --script S
[--api responses|chat] [--stream] [--kill-at model|tool|between]``; the tests also
:func:`build` it in their own process (an uncrashed run, a resume).

The model is the scripted server of ``tests/integration/agents_server.py`` (script ``S``
is its model name). The tools write to a separate SQLite "world" with the key they read
from ``durably.current_step()``: every execution is logged in ``attempts`` (tool, key,
pid) and its effect is deduplicated by key in ``effects``, as a receiving service
would. ``--kill-at`` SIGKILLs this process: ``model`` right after the first model
response is recorded, ``tool`` inside ``refund`` after its write, ``between`` when the
first of two parallel calls is recorded (the second waits before it writes). Prints
``{"final": ..., "deltas": [...]}`` as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sqlite3
import sys
from dataclasses import dataclass
from typing import Any

from agents import (
    Agent,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    function_tool,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

import durably
from durably.integrations.openai_agents import DurableRunner

set_tracing_disabled(True)  # no trace export: the tests make no request off this host


@dataclass(frozen=True)
class Options:
    """What one run of the agent is: its journal, world, model server and script."""

    journal: str
    world: str
    base_url: str
    script: str
    api: str = "responses"
    stream: bool = False
    kill_at: str | None = None


def build(opts: Options) -> tuple[durably.Engine, Any, sqlite3.Connection]:
    """The engine (with the kill hook ``opts.kill_at`` asks for), the workflow and the
    world's connection (the caller closes both)."""
    w = sqlite3.connect(opts.world, isolation_level=None, timeout=10, check_same_thread=False)
    w.execute("CREATE TABLE IF NOT EXISTS attempts (tool TEXT, key TEXT, pid INT)")
    w.execute("CREATE TABLE IF NOT EXISTS effects (key TEXT PRIMARY KEY, tool TEXT)")

    def did(tool: str) -> str:
        info = durably.current_step()
        key = info.idempotency_key if info is not None else "none"
        w.execute("INSERT INTO attempts VALUES (?, ?, ?)", (tool, key, os.getpid()))
        w.execute("INSERT OR IGNORE INTO effects VALUES (?, ?)", (key, tool))
        return key

    @function_tool
    def refund(order_id: str, cents: int) -> str:
        """Refund part of an order."""
        did("refund")
        if opts.kill_at == "tool":
            os.kill(os.getpid(), signal.SIGKILL)
        return f"refunded {cents} cents on {order_id}"

    @function_tool
    async def notify(customer: str, text: str) -> str:
        """Message the customer."""
        # Long enough for the parallel refund to be recorded first (kill_at="between").
        await asyncio.sleep(1.0 if opts.kill_at == "between" else 0.05)
        did("notify")
        return f"sent {text!r} to {customer}"

    @function_tool(needs_approval=True)
    def close_account(user: str) -> str:
        """Close a customer's account (asks a person first)."""
        did("close_account")
        return f"closed {user}"

    tools = [refund, notify, close_account]

    def agent(client: AsyncOpenAI) -> Agent[Any]:
        def model(name: str) -> Any:
            if opts.api == "chat":
                return OpenAIChatCompletionsModel(model=name, openai_client=client)
            return OpenAIResponsesModel(model=name, openai_client=client)

        billing = Agent(name="billing", instructions="Refund.", model=model("refund"), tools=tools)
        return Agent(
            name="support",
            instructions="Help the customer.",
            model=model(opts.script),
            tools=tools,
            handoffs=[billing],
        )

    def hook(run_id: str, position: str, step_name: str, window: str) -> None:
        if window != "recorded":
            return
        if opts.kill_at == "model" and step_name.startswith("openai_agents.model"):
            os.kill(os.getpid(), signal.SIGKILL)
        if opts.kill_at == "between" and step_name == "refund":
            os.kill(os.getpid(), signal.SIGKILL)

    engine = durably.Engine(opts.journal, fault_hook=hook if opts.kill_at else None)

    @engine.workflow(name="support")
    async def support(ctx: durably.AsyncContext, question: str) -> dict[str, Any]:
        # One client per attempt, closed with it: its connections belong to this loop.
        async with AsyncOpenAI(
            base_url=opts.base_url, api_key="sk-test-not-a-real-key", max_retries=0
        ) as client:
            return await answer(agent(client), question)

    async def answer(agent: Agent[Any], question: str) -> dict[str, Any]:
        if not opts.stream:
            result = await DurableRunner.run(agent, question)
            return {"final": result.final_output, "deltas": []}
        streamed = DurableRunner.run_streamed(agent, question)
        deltas = []
        async for event in streamed.stream_events():
            data = getattr(event, "data", None)
            if getattr(data, "type", None) == "response.output_text.delta":
                deltas.append(data.delta)
        return {"final": streamed.final_output, "deltas": deltas}

    return engine, support, w


QUESTION = "refund order A-1"


def main() -> None:
    p = argparse.ArgumentParser()
    for name in ("journal", "world", "run_id"):
        p.add_argument(name)
    p.add_argument("--base-url", required=True)
    p.add_argument("--script", required=True)
    p.add_argument("--api", choices=["responses", "chat"], default="responses")
    p.add_argument("--stream", action="store_true")
    p.add_argument("--kill-at", choices=["model", "tool", "between"])
    a = p.parse_args()
    opts = Options(a.journal, a.world, a.base_url, a.script, a.api, a.stream, a.kill_at)
    engine, support, _ = build(opts)
    print(json.dumps(engine.run(support, QUESTION, run_id=a.run_id)))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
