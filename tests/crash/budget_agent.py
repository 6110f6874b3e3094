"""An agent whose model calls report usage, for the budget crash tests; run in a subprocess.

Usage: ``python budget_agent.py JOURNAL_URL WORLD_DB RUN_ID [--kill-at-effect STEP]
[--budget-tokens N] [--async]``. Three model calls (``plan``, ``draft``, ``review``) each
log themselves in the world database (the provider's bill: one row per call, with the
tokens it charged and the pid) and report the same usage with ``durably.usage``.
``--kill-at-effect STEP`` SIGKILLs this process in the engine's ``effect`` window of that
step: its call returned (and was billed), its result is not recorded. ``--budget-tokens``
gives the workflow ``budget=durably.Budget(tokens=N)``; ``--async`` runs the same steps
as an ``async def`` workflow. Prints the result, or ``{"error_type", "message"}`` for a
failed run (exit 3).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sqlite3
import sys
from typing import Any

import durably

# (tokens in, tokens out, cost) each call of a step charges.
PRICES = {"plan": (60, 40, 0.01), "draft": (700, 300, 0.1), "review": (400, 100, 0.05)}


def main() -> None:
    p = argparse.ArgumentParser()
    for name in ("journal", "world", "run_id"):
        p.add_argument(name)
    p.add_argument("--kill-at-effect")
    p.add_argument("--budget-tokens", type=int)
    p.add_argument("--async", dest="is_async", action="store_true")
    args = p.parse_args()
    w = sqlite3.connect(args.world, isolation_level=None, timeout=10, check_same_thread=False)
    w.execute("CREATE TABLE IF NOT EXISTS bill (step TEXT, tokens INT, cost REAL, pid INT)")

    def model(step: str, prompt: str) -> str:
        ins, outs, cost = PRICES[step]
        # The provider bills the call before it answers: the bill is the real spend.
        w.execute("INSERT INTO bill VALUES (?, ?, ?, ?)", (step, ins + outs, cost, os.getpid()))
        durably.usage(input_tokens=ins, output_tokens=outs, cost_usd=cost)
        return f"{step}({prompt})"

    def hook(run_id: str, position: str, name: str, window: str) -> None:
        if name == args.kill_at_effect and window == "effect":
            os.kill(os.getpid(), signal.SIGKILL)

    engine = durably.Engine(args.journal, fault_hook=hook)
    budget = None if args.budget_tokens is None else durably.Budget(tokens=args.budget_tokens)

    @engine.workflow(name="writer", budget=budget)
    def writer(ctx: durably.Context, topic: str) -> dict[str, str]:
        plan = ctx.step("plan", model, "plan", topic)
        draft = ctx.step("draft", model, "draft", plan)
        return {"review": ctx.step("review", model, "review", draft)}

    @engine.workflow(name="writer_async", budget=budget)
    async def writer_async(ctx: durably.AsyncContext, topic: str) -> dict[str, str]:
        plan = await ctx.step("plan", model, "plan", topic)
        draft = await ctx.step("draft", model, "draft", plan)
        return {"review": await ctx.step("review", model, "review", draft)}

    try:
        if args.is_async:
            result: Any = asyncio.run(engine.run_async(writer_async, "budgets", run_id=args.run_id))
        else:
            result = engine.run(writer, "budgets", run_id=args.run_id)
    except durably.WorkflowFailed as exc:
        print(json.dumps({"error_type": exc.type_name, "message": exc.message}))
        sys.exit(3)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
