"""An async agent whose tools come from an MCP server over stdio (``mcp_server.py``),
run in a subprocess for the crash test of ``durably.tools.from_mcp_session``.

Usage: ``python mcp_agent.py JOURNAL_URL WORLD_DB RUN_ID [--kill]``. The "model" answers
with two ``add_note`` calls; ``dispatch`` runs them concurrently. ``--kill`` SIGKILLs
this process right after the server did the second note (its effect window), before
durably recorded it. Prints the tool results as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from anthropic.types import Message
from mcp import Client, StdioServerParameters

import durably
from durably.tools import dispatch, from_mcp_session


def reply() -> Message:
    calls = [("n1", {"order": "A-1", "text": "gift"}), ("n2", {"order": "A-2", "text": "rush"})]
    return Message.model_validate(
        {
            "id": "m",
            "type": "message",
            "role": "assistant",
            "model": "claude-test",
            "usage": {"input_tokens": 1, "output_tokens": 1},
            "content": [
                {"type": "tool_use", "id": i, "name": "add_note", "input": a} for i, a in calls
            ],
        }
    )


async def main() -> None:
    p = argparse.ArgumentParser()
    for name in ("journal", "world", "run_id"):
        p.add_argument(name)
    p.add_argument("--kill", action="store_true")
    args = p.parse_args()
    params = StdioServerParameters(
        command=sys.executable,
        args=[str(Path(__file__).with_name("mcp_server.py"))],
        env={"MCP_WORLD": args.world},
    )

    def hook(run_id: str, position: str, step_name: str, window: str) -> None:
        if args.kill and position == "1.1.0" and window == "effect":
            os.kill(os.getpid(), signal.SIGKILL)

    async with Client(params) as client:
        tools = await from_mcp_session(client)
        with durably.Engine(args.journal, fault_hook=hook) as engine:

            @engine.workflow(name="notes")
            async def notes(ctx: durably.AsyncContext) -> Any:
                response = await ctx.step("model", reply)
                return await dispatch(ctx, response, tools)

            print(json.dumps(await engine.run_async(notes, run_id=args.run_id)))


if __name__ == "__main__":
    asyncio.run(main())
