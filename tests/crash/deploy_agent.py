"""A checkout agent whose code changes between runs, run in a subprocess by
test_gather_deploy.py.

Usage: ``python deploy_agent.py JOURNAL_URL WORLD_DB RUN_ID --version v1|v2
[--kill POS:WINDOW]``. Version ``v2`` is a deploy that adds one recorded call
(``await ctx.now()``) before the gather, shifting it from position 1 to 2. With ``--kill``
the fault hook SIGKILLs this process when the step at POS reaches WINDOW. Effects and
executions go to the world database (see agent.py). Prints the result as JSON; a blocked
run prints ``{"blocked": reason}`` and exits 4.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from typing import Any

from agent import WORLD_LOCK, world  # the same world as the crash matrix

import durably


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("journal")
    p.add_argument("world")
    p.add_argument("run_id")
    p.add_argument("--version", choices=("v1", "v2"), required=True)
    p.add_argument("--kill")
    args = p.parse_args()
    w = world(args.world)

    def effect(kind: str, key: str) -> str:
        with WORLD_LOCK:
            w.execute("INSERT INTO executions VALUES (?, ?)", (kind, key))
            w.execute(
                "INSERT INTO effects (key, kind, requests) VALUES (?, ?, 1)"
                " ON CONFLICT (key) DO UPDATE SET requests = requests + 1",
                (key, kind),
            )
        return f"{kind}@{key}"

    def plan(order: str) -> str:
        return f"plan for {order}"

    @durably.step(effect=True)
    def charge(order: str, *, idempotency_key: str) -> str:
        return effect("charge", idempotency_key)

    @durably.step(effect=True)
    def ship(order: str, *, idempotency_key: str) -> str:
        return effect("ship", idempotency_key)

    kill = tuple(args.kill.split(":")) if args.kill else None

    def hook(run_id: str, position: str, name: str, window: str) -> None:
        if (position, window) == kill:
            os.kill(os.getpid(), signal.SIGKILL)

    engine = durably.Engine(args.journal, fault_hook=hook if kill else None)

    @engine.workflow(name="checkout")
    async def checkout(ctx: durably.AsyncContext, order: str) -> dict[str, Any]:
        planned = await ctx.step("plan", plan, order)  # 0
        if args.version == "v2":
            await ctx.now()  # the deploy: one more recorded call before the gather
        charged, shipped = await ctx.gather(  # v1: 1 (1.0.0, 1.1.0); v2: 2
            ctx.step("charge", charge, order),
            ctx.step("ship", ship, order),
        )
        receipt = await ctx.step("receipt", plan, f"{charged} {shipped}")  # v1: 2
        return {"plan": planned, "charged": charged, "shipped": shipped, "receipt": receipt}

    try:
        result = engine.run(checkout, "order-7", run_id=args.run_id)
    except durably.NonDeterminism as exc:
        print(json.dumps({"blocked": str(exc)}))
        sys.exit(4)
    print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    main()
