"""A tool-calling agent on a real model client, run as a subprocess by the crash tests.

Usage: ``python model_agent.py JOURNAL_URL BASE_URL WORLD_DB openai|anthropic [--kill]``.
The model asks for the ``refund`` tool; the tool (an effect step taking an idempotency
key) writes its key to the world's ``refunds`` table; with ``--kill`` the process then
SIGKILLs itself before the tool's result is recorded. The model is called again with the
tool's result. Prints ``{"answer": ...}``.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import sys
from typing import Any

import durably


def main() -> None:
    journal, base_url, world_path, provider, *rest = sys.argv[1:]
    kill = "--kill" in rest
    world = sqlite3.connect(world_path, isolation_level=None, timeout=10)
    world.execute("CREATE TABLE IF NOT EXISTS refunds (key TEXT, orderid TEXT)")

    @durably.step(effect=True)
    def refund(order: str, *, idempotency_key: str) -> dict[str, str]:
        world.execute("INSERT INTO refunds VALUES (?, ?)", (idempotency_key, order))
        if kill:
            os.kill(os.getpid(), signal.SIGKILL)
        return {"refunded": order}

    engine = durably.Engine(journal)
    if provider == "openai":
        import openai

        from durably.integrations.openai import wrap

        client = wrap(openai.OpenAI(api_key="sk-test", base_url=base_url))

        @engine.workflow(name="agent")
        def agent(ctx: durably.Context) -> dict[str, Any]:
            messages: list[Any] = [{"role": "user", "content": "refund order A-1"}]
            resp = client.chat.completions.create(model="gpt-test", messages=messages)
            msg = resp.choices[0].message
            messages.append(msg.model_dump(mode="json", exclude_none=True))
            for call in msg.tool_calls or []:
                args = json.loads(call.function.arguments)  # type: ignore[union-attr]
                out = ctx.step("refund", refund, args["order"])
                messages.append(
                    {"role": "tool", "tool_call_id": call.id, "content": json.dumps(out)}
                )
            final = client.chat.completions.create(model="gpt-test", messages=messages)
            return {"answer": final.choices[0].message.content}

    else:
        import anthropic

        from durably.integrations.anthropic import wrap as awrap

        aclient = awrap(anthropic.Anthropic(api_key="sk-test", base_url=base_url))

        @engine.workflow(name="agent")
        def agent(ctx: durably.Context) -> dict[str, Any]:
            messages: list[Any] = [{"role": "user", "content": "refund order A-1"}]
            resp = aclient.messages.create(
                model="claude-test", max_tokens=100, system="You refund.", messages=messages
            )
            messages.append(
                {"role": "assistant", "content": [b.model_dump() for b in resp.content]}
            )
            results = []
            for block in resp.content:
                if block.type == "tool_use":
                    out = ctx.step("refund", refund, block.input["order"])  # type: ignore[index]
                    results.append(
                        {"type": "tool_result", "tool_use_id": block.id, "content": json.dumps(out)}
                    )
            messages.append({"role": "user", "content": results})
            final = aclient.messages.create(
                model="claude-test", max_tokens=100, system="You refund.", messages=messages
            )
            return {"answer": final.content[0].text}  # type: ignore[union-attr]

    print(json.dumps(engine.run(agent, run_id="agent-1")))


if __name__ == "__main__":
    main()
