"""A tool-calling agent on the real ``openai`` client, made durable with one line
(``durably.integrations.openai.wrap``), killed with SIGKILL mid-run and resumed.

The loop: model -> tool calls -> tool results -> model, with one read tool
(``lookup_order``), one keyed write (``issue_refund``, an effect step that sends its
idempotency key to the payments service) and an approval before the write. The model is
``examples/model_server.py``, an offline server speaking the OpenAI wire format.

    python examples/openai_agent.py             # the whole story, offline (~2 s)
    python examples/openai_agent.py --anthropic # the same loop on the anthropic client

The story: the agent runs until the approval (the run parks; the process exits); a
person approves with ``durably approve``; the agent resumes and is SIGKILLed right after
the refund reached the payments service, before its result was recorded; then the one
command that resumes it, the same command that started it::

    python examples/openai_agent.py agent --db sqlite:///demo-output/agent/journal.db \\
        --base-url URL --world demo-output/agent/payments.db

replays the recorded model calls (the model server counts: none asked again), re-sends
the refund with the same key (the payments service answers it once) and finishes.
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
import time
from pathlib import Path
from typing import Any

import durably

HERE = Path(__file__).resolve().parent
OUT = Path("demo-output") / "agent"
RUN_ID = "refund-A-17"
REQUEST = "Order A-17 arrived broken. Please refund it."
SYSTEM = "You are a support agent. Look the order up, then refund it. Be brief."
PRICES = {"demo-model": (0.15, 0.60)}  # USD per million input / output tokens

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup_order",
            "description": "Look an order up by its id.",
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "string"}},
                "required": ["order_id"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "issue_refund",
            "description": "Refund an order (needs a person's approval).",
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "string"}, "amount_usd": {"type": "number"}},
                "required": ["order_id", "amount_usd"],
            },
        },
    },
]


# -- the outside world: a payments service that answers each idempotency key once ----


def payments(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, timeout=10)
    conn.execute(
        "CREATE TABLE IF NOT EXISTS refunds (key TEXT PRIMARY KEY, order_id TEXT,"
        " amount_usd REAL, refund_id TEXT, requests INT)"
    )
    return conn


# -- the tools ------------------------------------------------------------------------


def lookup_order(order_id: str) -> dict[str, Any]:
    """A read: safe to repeat."""
    return {"order_id": order_id, "status": "delivered", "total_usd": 42.5}


def make_refund_tool(world: str, kill_after_send: bool) -> Any:
    @durably.step(effect=True)
    def issue_refund(order_id: str, amount_usd: float, *, idempotency_key: str) -> dict[str, Any]:
        """A keyed write: the payments service makes one refund per key."""
        conn = payments(world)
        refund_id = f"rf_{idempotency_key[-8:].replace(':', '')}"
        conn.execute(
            "INSERT INTO refunds VALUES (?, ?, ?, ?, 1) ON CONFLICT(key) DO UPDATE"
            " SET requests = requests + 1",
            (idempotency_key, order_id, amount_usd, refund_id),
        )
        row = conn.execute(
            "SELECT refund_id FROM refunds WHERE key = ?", (idempotency_key,)
        ).fetchone()
        print(f"   refund sent to payments with key {idempotency_key}", flush=True)
        if kill_after_send:
            time.sleep(30)  # the acknowledgement is slow: the demo kills us here
        return {"refund_id": row[0], "order_id": order_id, "amount_usd": amount_usd}

    return issue_refund


# -- the agent ------------------------------------------------------------------------


def openai_agent(engine: durably.Engine, base_url: str, refund: Any) -> Any:
    import openai

    from durably.integrations.openai import wrap

    client = wrap(openai.OpenAI(base_url=f"{base_url}/v1", api_key="offline"), prices=PRICES)

    @engine.workflow(name="refund_agent")
    def refund_agent(ctx: durably.Context, request: str) -> str:
        messages: list[Any] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": request},
        ]
        for _ in range(8):
            resp = client.chat.completions.create(
                model="demo-model", messages=messages, tools=TOOLS
            )
            msg = resp.choices[0].message
            print(f"   model: {msg.content or [c.function.name for c in msg.tool_calls or []]}")  # type: ignore[union-attr]
            messages.append(msg.model_dump(mode="json", exclude_none=True))
            if not msg.tool_calls:
                return msg.content or ""
            for call in msg.tool_calls:
                args = json.loads(call.function.arguments)  # type: ignore[union-attr]
                out = run_tool(ctx, call.function.name, args, refund)  # type: ignore[union-attr]
                messages.append(
                    {"role": "tool", "tool_call_id": call.id, "content": json.dumps(out)}
                )
        return "gave up after 8 turns"

    return refund_agent


def anthropic_agent(engine: durably.Engine, base_url: str, refund: Any) -> Any:
    import anthropic

    from durably.integrations.anthropic import wrap

    client = wrap(anthropic.Anthropic(base_url=base_url, api_key="offline"), prices=PRICES)
    tools = [
        {
            "name": t["function"]["name"],  # type: ignore[index]
            "description": t["function"]["description"],  # type: ignore[index]
            "input_schema": t["function"]["parameters"],  # type: ignore[index]
        }
        for t in TOOLS
    ]

    @engine.workflow(name="refund_agent_anthropic")
    def refund_agent(ctx: durably.Context, request: str) -> str:
        messages: list[Any] = [{"role": "user", "content": request}]
        for _ in range(8):
            msg = client.messages.create(
                model="demo-model",
                max_tokens=512,
                system=SYSTEM,
                messages=messages,
                tools=tools,  # type: ignore[arg-type]
            )
            uses = [b for b in msg.content if b.type == "tool_use"]
            print(f"   model: {[b.name for b in uses] or msg.content[0].text}")  # type: ignore[union-attr]
            messages.append(
                {"role": "assistant", "content": [b.model_dump(mode="json") for b in msg.content]}
            )
            if not uses:
                return "".join(b.text for b in msg.content if b.type == "text")
            results = []
            for use in uses:
                out = run_tool(ctx, use.name, dict(use.input), refund)  # type: ignore[union-attr, arg-type]
                results.append(
                    {"type": "tool_result", "tool_use_id": use.id, "content": json.dumps(out)}
                )
            messages.append({"role": "user", "content": results})
        return "gave up after 8 turns"

    return refund_agent


def run_tool(ctx: durably.Context, name: str, args: dict[str, Any], refund: Any) -> Any:
    """Dispatch one tool call: each a recorded step; the write behind an approval."""
    if name == "lookup_order":
        return ctx.step("lookup_order", lookup_order, args["order_id"])
    if name == "issue_refund":
        decision = ctx.request_approval("issue_refund", args)
        if not decision.approved:
            return {"error": f"refund {decision.outcome} by {decision.by}"}
        return ctx.step("issue_refund", refund, args["order_id"], args["amount_usd"])
    return {"error": f"no tool {name!r}"}


def agent_main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="openai_agent.py agent")
    p.add_argument("--db", required=True)
    p.add_argument("--base-url", required=True)
    p.add_argument("--world", required=True)
    p.add_argument("--anthropic", action="store_true")
    p.add_argument("--kill-after-send", action="store_true")
    a = p.parse_args(argv)
    engine = durably.Engine(a.db, park_wait_s=0.0)
    refund = make_refund_tool(a.world, a.kill_after_send)
    make = anthropic_agent if a.anthropic else openai_agent
    wf = make(engine, a.base_url, refund)
    try:
        answer = engine.run(wf, REQUEST, run_id=RUN_ID)
    except durably.RunParked:
        print("   parked: waiting for a person to approve the refund", flush=True)
        return
    print(f"   answer: {answer}")


# -- the story ------------------------------------------------------------------------


def main() -> None:
    """Run the whole story offline."""
    sys.path.insert(0, str(HERE))
    from model_server import ModelServer

    use_anthropic = "--anthropic" in sys.argv[1:]
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    db, world = f"sqlite:///{OUT / 'journal.db'}", str(OUT / "payments.db")
    server = ModelServer()
    cmd = [
        sys.executable,
        "-u",
        str(Path(__file__).resolve()),
        "agent",
        "--db",
        db,
        "--base-url",
        server.url,
        "--world",
        world,
        *(["--anthropic"] if use_anthropic else []),
    ]
    client = "anthropic" if use_anthropic else "openai"
    print(f"== 1. the agent starts (the real {client} client, an offline model at {server.url})")
    subprocess.run(cmd, check=True)
    print(f"   model requests so far: {server.requests}")

    engine = durably.Engine(db)
    [pending] = engine.pending_approvals(RUN_ID)
    approve = [
        *("durably", "approve", RUN_ID, pending.request_id),
        *("--digest", pending.digest[:12], "--by", "alice", "--db", db),
    ]
    print(f"\n== 2. a person approves: {' '.join(approve)}")
    durably_cli = [sys.executable, "-m", "durably.cli", *approve[1:]]
    subprocess.run(durably_cli, check=True, stdout=subprocess.DEVNULL)

    print("\n== 3. the agent resumes; SIGKILL once the refund reached the payments service")
    print("   (replayed from the top: the two model turns above return their records, unasked)")
    child = subprocess.Popen([*cmd, "--kill-after-send"], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    for line in child.stdout:
        print(line, end="")
        if "refund sent" in line:
            break
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    before = server.requests
    print(f"   killed pid {child.pid} with SIGKILL (exit {child.returncode})")

    print("\n== 4. the same command again: recorded steps replay, the rest go live")
    shown = ["python", "examples/openai_agent.py", *cmd[3:]]
    print(f"   $ {' '.join(shown)}")
    print("   (the body runs again from the top: recorded calls return their results)")
    subprocess.run(cmd, check=True)

    spend = engine.spend(RUN_ID)
    with payments(world) as conn:
        rows = conn.execute("SELECT key, refund_id, requests FROM refunds").fetchall()
    print(
        f"\n== 5. model requests: {server.requests} in all, {server.requests - before} after"
        " the kill (the recorded model calls were replayed, not asked again)"
    )
    print(f"   refunds at the payments service: {len(rows)}")
    for key, refund_id, requests in rows:
        print(f"   {refund_id}: sent {requests} times with the same key {key}, refunded once")
    print(f"   spend: {spend.tokens} tokens, ${spend.cost_usd:.6f}")
    server.close()
    if len(rows) != 1 or server.requests - before != 1:
        sys.exit("unexpected: a refund or a model call happened twice")


if __name__ == "__main__":
    if sys.argv[1:2] == ["agent"]:
        agent_main(sys.argv[2:])
    else:
        main()
