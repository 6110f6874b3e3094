"""An OpenAI Agents SDK agent made durable with ``DurableRunner``, killed with SIGKILL
inside its refund tool and resumed: no recorded model turn is asked again, and the
payments service sees the refund's key twice but refunds once.

    python examples/openai_agents_runner.py     # the whole story, offline (~4 s)

The model is ``examples/model_server.py`` (an offline server speaking the OpenAI wire
format, counting its requests), reached through the SDK's
``OpenAIChatCompletionsModel``. The agent has a read tool (``lookup_order``, a plain
SDK ``@function_tool``: a recorded step) and a keyed write (``issue_refund``, a
``@durably.tool(kind="write")`` made an SDK tool by ``openai_agents.function_tool``: it
receives an idempotency key the model never sees). The command that runs the agent is
also the one that resumes it::

    python examples/openai_agents_runner.py agent --db sqlite:///demo-output/agents/journal.db \\
        --base-url URL --world demo-output/agents/payments.db
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
OUT = Path("demo-output") / "agents"
RUN_ID = "refund-A-17"
REQUEST = "Order A-17 arrived broken. Please refund it."


def payments(path: str) -> sqlite3.Connection:
    """The payments service's database: each idempotency key refunds once."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=10, check_same_thread=False)
    conn.execute("CREATE TABLE IF NOT EXISTS seen (key TEXT, pid INT)")
    conn.execute("CREATE TABLE IF NOT EXISTS refunds (key TEXT PRIMARY KEY, order_id TEXT)")
    return conn


def agent_main(db: str, base_url: str, world: str, kill: bool) -> None:
    """Run (or resume) the agent's workflow once."""
    from agents import Agent, OpenAIChatCompletionsModel, function_tool, set_tracing_disabled
    from openai import AsyncOpenAI

    import durably
    from durably.integrations import openai_agents
    from durably.integrations.openai_agents import DurableRunner

    set_tracing_disabled(True)  # offline: no trace export
    conn = payments(world)

    @function_tool
    def lookup_order(order_id: str) -> str:
        """Look an order up by its id."""
        return json.dumps({"order_id": order_id, "total_usd": 42.0})

    @durably.tool(kind="write")
    def issue_refund(order_id: str, amount_usd: float, idempotency_key: str) -> str:
        """Refund an order."""
        conn.execute("INSERT INTO seen VALUES (?, ?)", (idempotency_key, os.getpid()))
        conn.execute("INSERT OR IGNORE INTO refunds VALUES (?, ?)", (idempotency_key, order_id))
        if kill:  # the crash: the refund reached the service, its result is not recorded
            os.kill(os.getpid(), signal.SIGKILL)
        refund_id = "re_" + idempotency_key.rsplit(":", 1)[1]
        return json.dumps({"refund_id": refund_id, "order_id": order_id, "amount_usd": amount_usd})

    engine = durably.Engine(db)

    @engine.workflow(name="support")
    async def support(ctx: durably.AsyncContext, request: str) -> str:
        async with AsyncOpenAI(base_url=base_url, api_key="sk-offline-demo") as client:
            agent = Agent(
                name="support",
                instructions="Look the order up, then refund it. Be brief.",
                model=OpenAIChatCompletionsModel(model="demo-model", openai_client=client),
                tools=[lookup_order, openai_agents.function_tool(issue_refund)],
            )
            result = await DurableRunner.run(agent, request)
            return str(result.final_output)

    print(engine.run(support, REQUEST, run_id=RUN_ID))


def story() -> None:
    """Run the agent, SIGKILL it inside the refund, resume it; print what happened."""
    sys.path.insert(0, str(HERE))
    from model_server import ModelServer

    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    server = ModelServer(0)
    cmd = [sys.executable, __file__, "agent", "--db", f"sqlite:///{OUT / 'journal.db'}"]
    cmd += ["--base-url", f"{server.url}/v1", "--world", str(OUT / "payments.db")]
    try:
        first = subprocess.run([*cmd, "--kill-in-refund"], capture_output=True, text=True)
        print(
            f"1. the agent was killed (exit {first.returncode}) inside issue_refund, after"
            f" the payment; the model had answered {server.requests} requests"
        )
        asked = server.requests
        second = subprocess.run(cmd, capture_output=True, text=True, check=True)
        print(f"2. the same command resumed it: {second.stdout.strip()!r}")
        print(
            f"   model requests after the kill: {server.requests - asked} (the last turn;"
            " the recorded turns were replayed)"
        )
        with sqlite3.connect(OUT / "payments.db") as conn:
            seen = conn.execute("SELECT key FROM seen").fetchall()
            refunds = conn.execute("SELECT key FROM refunds").fetchall()
        print(
            f"3. the payments service saw key {seen[0][0]} {len(seen)} times and refunded"
            f" {len(refunds)} time(s)"
        )
    finally:
        server.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="cmd")
    a = sub.add_parser("agent", help="run or resume the agent once")
    a.add_argument("--db", required=True)
    a.add_argument("--base-url", required=True)
    a.add_argument("--world", required=True)
    a.add_argument("--kill-in-refund", action="store_true")
    args: Any = p.parse_args()
    if args.cmd == "agent":
        agent_main(args.db, args.base_url, args.world, args.kill_in_refund)
    else:
        story()


if __name__ == "__main__":
    main()
