"""A support agent whose model answers with three tool calls, run in a subprocess for
the crash test of ``durably.tools.dispatch``.

Usage: ``python dispatch_agent.py JOURNAL_URL WORLD_DB RUN_ID [--kill-at WINDOW]``.
The "model" is a recorded step returning a real ``openai`` ChatCompletion with three
tool calls: ``refund`` (good arguments), ``refund`` again with a bad argument (``cents``
is not an integer: a tool-error message for the model, no step), and ``notify`` (good).
Each execution of a tool is logged in the world with its key and pid; the effects are
deduplicated by key. ``--kill-at before|effect`` SIGKILLs this process at that window of
the ``notify`` step (through the engine's fault hook): ``before`` is between the second
call and the third (nothing of the third recorded or done), ``effect`` right after the
third's effect, before its record. Prints the tool-result messages as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3

from openai.types.chat import ChatCompletion

import durably
from durably.tools import dispatch


def reply() -> ChatCompletion:
    calls = [
        ("call_1", "refund", {"order_id": "A-1", "cents": 500}),
        ("call_2", "refund", {"order_id": "A-2", "cents": "lots"}),
        ("call_3", "notify", {"customer": "ana", "text": "refunded 5 EUR"}),
    ]
    return ChatCompletion.model_validate(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": "gpt-test",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "tool_calls",
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": i,
                                "type": "function",
                                "function": {"name": n, "arguments": json.dumps(a)},
                            }
                            for i, n, a in calls
                        ],
                    },
                }
            ],
        }
    )


def main() -> None:
    p = argparse.ArgumentParser()
    for name in ("journal", "world", "run_id"):
        p.add_argument(name)
    p.add_argument("--kill-at", choices=["before", "effect"])
    args = p.parse_args()
    w = sqlite3.connect(args.world, isolation_level=None, timeout=10)
    w.execute("CREATE TABLE IF NOT EXISTS attempts (tool TEXT, key TEXT, pid INT)")
    w.execute("CREATE TABLE IF NOT EXISTS effects (key TEXT PRIMARY KEY, tool TEXT)")

    def did(tool: str, key: str) -> None:
        w.execute("INSERT INTO attempts VALUES (?, ?, ?)", (tool, key, os.getpid()))
        w.execute("INSERT OR IGNORE INTO effects VALUES (?, ?)", (key, tool))

    @durably.tool(kind="write")
    def refund(order_id: str, cents: int, idempotency_key: str) -> str:
        """Refund part of an order."""
        did("refund", idempotency_key)
        return f"refunded {cents} cents on {order_id}"

    @durably.tool(kind="write")
    def notify(customer: str, text: str, idempotency_key: str) -> str:
        """Message the customer."""
        did("notify", idempotency_key)
        return f"sent to {customer}"

    def hook(run_id: str, position: str, step_name: str, window: str) -> None:
        if step_name == "notify" and window == args.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    engine = durably.Engine(args.journal, fault_hook=hook if args.kill_at else None)

    @engine.workflow(name="support")
    def support(ctx: durably.Context) -> object:
        response = ctx.step("model", reply)
        return dispatch(ctx, response, [refund, notify])

    print(json.dumps(engine.run(support, run_id=args.run_id)))


if __name__ == "__main__":
    main()
