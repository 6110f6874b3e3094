"""A small incident agent run in a subprocess by the crash tests.

Usage: ``python agent.py JOURNAL_URL WORLD_DB RUN_ID [--kill POS:WINDOW] [--unkeyed]
[--async] [--flaky SEED:RATE] [--durability MODE]``. With ``--flaky`` the journal's
appends, finishes and releases fail at random (rate RATE, seeded) with the errors a busy
database, a dropped connection or a full disk raise, before or after the write; a run
that stops on one prints ``{"store_error": ...}`` and exits 4. With ``--kill`` the
engine's fault hook SIGKILLs this process (a real signal) when the step at position POS
reaches WINDOW (before, effect, recorded). The world database stands in for the outside
world: ``effects`` deduplicates on the idempotency key and counts every request;
``executions`` counts every call of every step function, outside the journal. Prints the
workflow's result as JSON on success.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sqlite3
import sys
import threading
from pathlib import Path
from typing import Any

import durably

WORLD_LOCK = threading.Lock()


def world(path: str) -> sqlite3.Connection:
    # Sync step functions of async workflows run in durably's step threads: the world's
    # connection is shared by them (calls are serialized by WORLD_LOCK).
    conn = sqlite3.connect(path, isolation_level=None, timeout=10, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE IF NOT EXISTS executions (step TEXT, key TEXT)")
    conn.execute(
        "CREATE TABLE IF NOT EXISTS effects (id INTEGER PRIMARY KEY, key TEXT UNIQUE,"
        " kind TEXT, requests INTEGER)"
    )
    return conn


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("journal")
    p.add_argument("world")
    p.add_argument("run_id")
    p.add_argument("--kill")
    p.add_argument("--unkeyed", action="store_true")
    p.add_argument("--async", dest="use_async", action="store_true")
    p.add_argument("--flaky")
    p.add_argument("--durability", choices=("power", "process", "effects"))
    args = p.parse_args()
    w = world(args.world)

    def executed(step: str, key: str | None) -> None:
        with WORLD_LOCK:
            w.execute("INSERT INTO executions VALUES (?, ?)", (step, key))

    def effect(kind: str, key: str) -> str:
        # The receiving side honours the key: a repeated key returns the first result.
        with WORLD_LOCK:
            w.execute(
                "INSERT INTO effects (key, kind, requests) VALUES (?, ?, 1)"
                " ON CONFLICT (key) DO UPDATE SET requests = requests + 1",
                (key, kind),
            )
            (row_id,) = w.execute("SELECT id FROM effects WHERE key = ?", (key,)).fetchone()
        return f"{kind}#{row_id}"

    def model(prompt: str, *, idempotency_key: str) -> dict[str, Any]:
        executed("model:" + prompt, idempotency_key)
        return {"text": f"plan for {prompt}", "tokens": 1000}

    def read(what: str, *, idempotency_key: str) -> list[str]:
        executed("read:" + what, idempotency_key)
        return [f"{what}-line-{i}" for i in range(3)]

    @durably.step(effect=True)
    def open_ticket(title: str, *, idempotency_key: str) -> str:
        executed("open_ticket", idempotency_key)
        return effect("ticket", idempotency_key)

    @durably.step(effect=True)
    def page_oncall(who: str, *, idempotency_key: str) -> str:
        executed("page_oncall", idempotency_key)
        return effect("page", idempotency_key)

    @durably.step(effect=True)
    def post_status(text: str, *, idempotency_key: str) -> str:
        executed("post_status", idempotency_key)
        return effect("status", idempotency_key)

    @durably.step(effect=True)
    def post_status_unkeyed(text: str) -> str:
        executed("post_status", None)
        return effect(
            "status", f"unkeyed-{w.execute('SELECT count(*) FROM effects').fetchone()[0]}"
        )

    kill = tuple(args.kill.split(":")) if args.kill else None

    def hook(run_id: str, position: str, name: str, window: str) -> None:
        if (position, window) == kill:
            os.kill(os.getpid(), signal.SIGKILL)

    engine = durably.Engine(
        args.journal, fault_hook=hook if kill else None, durability=args.durability
    )
    if args.flaky:
        sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
        from tests.store_faults import FlakyStore

        seed, rate = args.flaky.split(":")
        log = str(Path(args.world).with_name("injected.log"))
        engine.store = FlakyStore(engine.store, rate=float(rate), seed=int(seed), log=log)  # type: ignore[assignment]

    @engine.workflow(name="incident")
    def incident(ctx: durably.Context, alert: str) -> dict[str, Any]:
        plan = ctx.step("plan", model, alert)  # 0
        ticket = ctx.step("open_ticket", open_ticket, plan["text"])  # 1 effect
        night = ctx.now().hour < 6  # 2 recorded clock
        # The page's input depends on the recorded clock: replay must take the same branch.
        who = "sre-night" if night else "sre-day"
        page = ctx.step("page_oncall", page_oncall, who)  # 3 effect
        logs = ctx.step("query_logs", read, "logs")  # 4
        poster = post_status_unkeyed if args.unkeyed else post_status
        status = ctx.step("post_status", poster, f"{ticket}: mitigating")  # 5 effect
        summary = ctx.step("summarize", model, f"{ticket} {page} {len(logs)}")  # 6
        return {"ticket": ticket, "page": page, "status": status, "summary": summary["text"]}

    @engine.workflow(name="incident_async")
    async def incident_async(ctx: durably.AsyncContext, alert: str) -> dict[str, Any]:
        async def amodel(prompt: str, *, idempotency_key: str) -> dict[str, Any]:
            await asyncio.sleep(0.001 * (len(prompt) % 5))
            return model(prompt, idempotency_key=idempotency_key)

        plan = await ctx.step("plan", amodel, alert)  # 0
        ticket, page, logs = await ctx.gather(  # 1: 1.0.0, 1.1.0, 1.2.0
            ctx.step("open_ticket", open_ticket, plan["text"]),
            ctx.step("page_oncall", page_oncall, "sre"),
            ctx.step("query_logs", read, "logs"),
        )
        summary = await ctx.step("summarize", amodel, f"{ticket} {page} {len(logs)}")  # 2
        return {"ticket": ticket, "page": page, "summary": summary["text"]}

    try:
        wf = incident_async if args.use_async else incident
        result = engine.run(wf, "disk full on db-3", run_id=args.run_id)
    except durably.RunInDoubt as exc:
        print(json.dumps({"in_doubt": str(exc)}))
        sys.exit(3)
    except durably.StoreError as exc:
        print(json.dumps({"store_error": str(exc)}))
        sys.exit(4)
    print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    main()
