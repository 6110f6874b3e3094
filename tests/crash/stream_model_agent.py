"""A tool-calling agent whose model turns are streamed, run as a subprocess by the crash
tests: ``stream_model_agent.py JOURNAL_URL BASE_URL WORLD_DB openai|anthropic RUN_ID
[--kill-in-tool]``.

Turn 1 is a streamed call (OpenAI ``chat.completions.create(stream=True)``, or
Anthropic's ``messages.stream``) that asks for the ``refund`` tool; the agent writes what
it iterated (the text and the tool call) to the world's ``turns`` table; the tool (an
effect step with an idempotency key) writes its key to ``refunds`` and, with
``--kill-in-tool``, SIGKILLs the process before its result is recorded. Turn 2, streamed
too, answers. Prints ``{"answer": ...}``.
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
    journal, base_url, world_path, provider, run_id, *rest = sys.argv[1:]
    kill = "--kill-in-tool" in rest
    world = sqlite3.connect(world_path, isolation_level=None, timeout=10)
    world.execute("CREATE TABLE IF NOT EXISTS refunds (key TEXT, orderid TEXT)")
    world.execute("CREATE TABLE IF NOT EXISTS turns (pid INT, text TEXT, tool TEXT)")

    @durably.step(effect=True)
    def refund(order: str, *, idempotency_key: str) -> dict[str, str]:
        world.execute("INSERT INTO refunds VALUES (?, ?)", (idempotency_key, order))
        if kill:
            os.kill(os.getpid(), signal.SIGKILL)
        return {"refunded": order}

    def seen(text: str, tool: Any) -> None:
        world.execute("INSERT INTO turns VALUES (?, ?, ?)", (os.getpid(), text, json.dumps(tool)))

    engine = durably.Engine(journal)
    if provider == "openai":
        import openai

        from durably.integrations.openai import wrap

        client = wrap(openai.OpenAI(api_key="sk-test", base_url=base_url))

        def turn(messages: list[Any]) -> tuple[str, Any, str | None]:
            text, name, args, call_id = "", None, "", None
            stream = client.chat.completions.create(
                model="gpt-test",
                messages=messages,
                stream=True,
                stream_options={"include_usage": True},
            )
            for chunk in stream:
                for choice in chunk.choices:
                    text += choice.delta.content or ""
                    for tc in choice.delta.tool_calls or ():
                        call_id = tc.id or call_id
                        name = (tc.function and tc.function.name) or name
                        args += (tc.function and tc.function.arguments) or ""
            return text, (name, json.loads(args)) if name else None, call_id

        @engine.workflow(name="agent")
        def agent(ctx: durably.Context) -> dict[str, Any]:
            messages: list[Any] = [{"role": "user", "content": "refund order A-1"}]
            text, tool, call_id = turn(messages)
            seen(text, tool)
            if tool is not None:
                out = ctx.step("refund", refund, tool[1]["order"])
                call = {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": tool[0], "arguments": json.dumps(tool[1])},
                }
                messages.append({"role": "assistant", "content": text, "tool_calls": [call]})
                messages.append(
                    {"role": "tool", "tool_call_id": call_id, "content": json.dumps(out)}
                )
            return {"answer": turn(messages)[0]}

    else:
        import anthropic

        from durably.integrations.anthropic import wrap as awrap

        aclient = awrap(anthropic.Anthropic(api_key="sk-test", base_url=base_url))

        def aturn(messages: list[Any]) -> Any:
            with aclient.messages.stream(
                model="claude-test", max_tokens=100, messages=messages
            ) as stream:
                text = "".join(stream.text_stream)
                return text, stream.get_final_message()

        @engine.workflow(name="agent")
        def agent(ctx: durably.Context) -> dict[str, Any]:
            messages: list[Any] = [{"role": "user", "content": "refund order A-1"}]
            text, msg = aturn(messages)
            uses = [b for b in msg.content if b.type == "tool_use"]
            seen(text, [uses[0].name, uses[0].input] if uses else None)
            messages.append({"role": "assistant", "content": [b.model_dump() for b in msg.content]})
            results = []
            for block in uses:
                out = ctx.step("refund", refund, block.input["order"])  # type: ignore[index]
                results.append(
                    {"type": "tool_result", "tool_use_id": block.id, "content": json.dumps(out)}
                )
            messages.append({"role": "user", "content": results})
            return {"answer": aturn(messages)[0]}

    try:
        print(json.dumps(engine.run(agent, run_id=run_id)), flush=True)
    finally:
        engine.close()


if __name__ == "__main__":
    main()
