"""A travel agent with a saga, run in a subprocess by tests/crash/test_saga_crash.py.

Usage: ``python saga_agent.py JOURNAL_URL WORLD_DB RUN_ID [--kill POS:WINDOW] [--async]
[--hold ITEM]``.
The saga books a flight, a hotel and a car, then the tour fails for good (no seats), so
the car, the hotel and the flight are cancelled, in that order. Every booking and every
cancellation is an effect on the world database, keyed by its idempotency key (a
repeated key is counted as a request, never performed twice); ``executions`` counts every
call of every step function, outside the journal. With ``--kill`` the engine's fault hook
SIGKILLs this process (a real signal) when the step at POS reaches WINDOW (before,
effect, recorded). With ``--hold ITEM`` the booking of ITEM writes ``inside`` next to the
world database and waits for ``release`` there (the test cancels the run meanwhile, from
another process). Prints ``{"failed": ..., "message": ...}`` and exits 3 when the run
ends failed, ``{"cancelled": reason}`` and exits 5 when it ends cancelled.
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
import time
from pathlib import Path
from typing import Any

import durably

WORLD_LOCK = threading.Lock()
TRIP = ("flight", "hotel", "car")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("journal")
    p.add_argument("world")
    p.add_argument("run_id")
    p.add_argument("--kill")
    p.add_argument("--async", dest="use_async", action="store_true")
    p.add_argument("--hold")
    args = p.parse_args()
    w = sqlite3.connect(args.world, isolation_level=None, timeout=10, check_same_thread=False)
    w.execute("PRAGMA journal_mode=WAL")
    w.execute("CREATE TABLE IF NOT EXISTS executions (fn TEXT, key TEXT)")
    w.execute("CREATE TABLE IF NOT EXISTS effects (key TEXT PRIMARY KEY, what TEXT, requests INT)")

    def effect(fn: str, what: str, key: str) -> str:
        with WORLD_LOCK:
            w.execute("INSERT INTO executions VALUES (?, ?)", (fn, key))
            w.execute(
                "INSERT INTO effects VALUES (?, ?, 1)"
                " ON CONFLICT (key) DO UPDATE SET requests = requests + 1",
                (key, what),
            )
        return f"{what}@{key}"

    folder = Path(args.world).parent

    def hold() -> None:
        (folder / "inside").write_text("1")
        deadline = time.monotonic() + 60
        while not (folder / "release").exists():
            if time.monotonic() > deadline:
                raise TimeoutError("the test never released the booking")
            time.sleep(0.01)

    def book(item: str, *, idempotency_key: str) -> dict[str, str]:
        if item == args.hold:
            hold()
        return {"item": item, "ref": effect(f"book:{item}", f"booked {item}", idempotency_key)}

    def cancel(item: str, *, idempotency_key: str, result: dict[str, str]) -> str:
        assert result["item"] == item
        return effect(f"cancel:{item}", f"cancelled {result['ref']}", idempotency_key)

    def tour(item: str) -> None:
        with WORLD_LOCK:
            w.execute("INSERT INTO executions VALUES (?, NULL)", (f"book:{item}",))
        raise ValueError("no seats left on the tour")

    def hook(run_id: str, pos: str, name: str, window: str) -> None:
        if args.kill == f"{pos}:{window}":
            os.kill(os.getpid(), signal.SIGKILL)

    engine = durably.Engine(args.journal, fault_hook=hook)

    @engine.workflow(name="trip")
    def trip(ctx: durably.Context) -> list[Any]:
        with ctx.saga() as saga:
            out = [saga.step(item, book, cancel, item) for item in TRIP]
            saga.step("tour", tour, cancel, "tour")
        return out

    @engine.workflow(name="trip_async")
    async def trip_async(ctx: durably.AsyncContext) -> list[Any]:
        async with ctx.saga() as saga:
            out = [await saga.step(item, book, cancel, item) for item in TRIP]
            await saga.step("tour", tour, cancel, "tour")
        return out

    try:
        if args.use_async:
            result = asyncio.run(engine.run_async(trip_async, run_id=args.run_id))
        else:
            result = engine.run(trip, run_id=args.run_id)
    except durably.WorkflowFailed as exc:
        print(json.dumps({"failed": exc.type_name, "message": exc.message}))
        sys.exit(3)
    except durably.Cancelled as exc:
        print(json.dumps({"cancelled": exc.reason}))
        sys.exit(5)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
