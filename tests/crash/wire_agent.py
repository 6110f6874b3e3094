"""A payout agent whose wire transfer takes no idempotency key, run by the crash tests.

Usage: ``python wire_agent.py JOURNAL_URL WORLD_DB RUN_ID [--kill] [--renamed]
[--max-starts N]``. With ``--kill`` the process SIGKILLs itself (a real signal) after the
wire transfer happened and before it was recorded. ``--renamed`` is a deploy that renamed
the wire step (the run blocks on it); ``--max-starts`` is the engine's quarantine limit.
The world database counts every transfer, outside the journal. Exit codes: 0 done (the
result printed as JSON), 3 in doubt, 4 blocked, 5 quarantined.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import sys

import durably


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("journal")
    p.add_argument("world")
    p.add_argument("run_id")
    p.add_argument("--kill", action="store_true")
    p.add_argument("--renamed", action="store_true")
    p.add_argument("--max-starts", type=int, default=10)
    args = p.parse_args()
    world = sqlite3.connect(args.world, isolation_level=None, timeout=10)
    world.execute("CREATE TABLE IF NOT EXISTS transfers (amount INTEGER)")

    @durably.step(effect=True)
    def wire(amount: int) -> str:
        # No idempotency key, no reconcile: the bank cannot be asked whether it happened.
        world.execute("INSERT INTO transfers VALUES (?)", (amount,))
        return f"wired {amount}"

    def hook(run_id: str, position: str, name: str, window: str) -> None:
        if args.kill and window == "effect":
            os.kill(os.getpid(), signal.SIGKILL)

    engine = durably.Engine(args.journal, fault_hook=hook, max_starts=args.max_starts)

    @engine.workflow(name="payout")
    def payout(ctx: durably.Context, amount: int) -> str:
        receipt = ctx.step("wire_v2" if args.renamed else "wire", wire, amount)  # 0
        return ctx.step("notify", lambda r: f"told the customer: {r}", receipt)  # 1

    try:
        print(json.dumps(engine.run(payout, 1000, run_id=args.run_id)))
    except durably.RunInDoubt as exc:
        print(json.dumps({"in_doubt": str(exc)}))
        sys.exit(3)
    except durably.NonDeterminism as exc:
        print(json.dumps({"blocked": str(exc)}))
        sys.exit(4)
    except durably.RunQuarantined as exc:
        print(json.dumps({"quarantined": str(exc)}))
        sys.exit(5)


if __name__ == "__main__":
    main()
