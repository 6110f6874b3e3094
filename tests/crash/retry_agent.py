"""A payment agent for the crash tests of keys and inputs, run in a subprocess.

Usage: ``python retry_agent.py JOURNAL_URL WORLD_DB RUN_ID [--kill-on-attempt N]
[--note TEXT]``. The ``charge`` step is retried on ``ConnectionError``: its first attempt
fails before reaching the receiver (a reset connection). Each attempt is logged in the
world with its idempotency key and pid. The receiver is durably's own receiving side
(``IdempotencyStore.execute``, on ``receiver.db`` next to the world), which charges
once per key. ``--kill-on-attempt N``
SIGKILLs this process right after attempt N got the receiver's answer (the charge is
done, the reply is lost). ``--note`` changes the input of the first step (a deploy that
changed the code under a running run). Exits 4 on NonDeterminism.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import sys
from pathlib import Path

import durably
from durably.idempotency import IdempotencyStore, fingerprint_of, migrate


def main() -> None:
    p = argparse.ArgumentParser()
    for name in ("journal", "world", "run_id"):
        p.add_argument(name)
    p.add_argument("--kill-on-attempt", type=int)
    p.add_argument("--note", default="")
    args = p.parse_args()
    w = sqlite3.connect(args.world, isolation_level=None, timeout=10)
    w.execute("CREATE TABLE IF NOT EXISTS attempts (step TEXT, key TEXT, pid INT)")
    w.execute("CREATE TABLE IF NOT EXISTS charges (key TEXT, amount INT)")
    receiver_url = f"sqlite:///{Path(args.world).with_name('receiver.db')}"
    migrate(receiver_url)  # the receiver's tables, as `durably migrate --idempotency` makes
    receiver = IdempotencyStore(receiver_url)

    def attempt(step: str, key: str) -> int:
        w.execute("INSERT INTO attempts VALUES (?, ?, ?)", (step, key, os.getpid()))
        row = w.execute("SELECT count(*) FROM attempts WHERE step = ?", (step,)).fetchone()
        return int(row[0])

    def plan(note: str, *, idempotency_key: str) -> int:
        attempt("plan", idempotency_key)
        return 42

    @durably.step(retries=3, backoff=0.01, retry_on=(ConnectionError,))
    def charge(amount: int, *, idempotency_key: str) -> str:
        n = attempt("charge", idempotency_key)
        if n == 1:
            raise ConnectionResetError("connection reset before the request was sent")

        def do_charge() -> str:
            w.execute("INSERT INTO charges VALUES (?, ?)", (idempotency_key, amount))
            return f"ch_{amount}"

        done = receiver.execute(idempotency_key, fingerprint_of("charge", amount), do_charge)
        if n == args.kill_on_attempt:
            os.kill(os.getpid(), signal.SIGKILL)
        return str(done.result)

    engine = durably.Engine(args.journal)

    @engine.workflow(name="pay")
    def pay(ctx: durably.Context) -> dict[str, str]:
        amount = ctx.step("plan", plan, "charge the invoice" + args.note)
        return {"charge": ctx.step("charge", charge, amount)}

    try:
        result = engine.run(pay, run_id=args.run_id)
    except durably.NonDeterminism as exc:
        print(json.dumps({"nondeterminism": str(exc)}))
        sys.exit(4)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
