"""The agent of the gather-waits crash test: ``python gather_wait_agent.py JOURNAL_URL
WORLD_DB RUN_ID SLEEP_S`` runs, in one ``ctx.gather``, a timer of ``SLEEP_S`` seconds, a
timer of ``SLEEP_S + 1`` seconds and a ``draft`` step (an effect, counted in the world
database); then posts (another counted effect). ``engine.run`` waits in this process
while the run is parked. Prints the result as JSON.

``SLEEP_S`` is read by the code, not passed as the workflow's input: the test restarts
the agent with another duration to show that both timers keep the wake times they
recorded.
"""

from __future__ import annotations

import json
import sqlite3
import sys

import durably

SLEEP_S = 0.0


def world(path: str) -> sqlite3.Connection:
    # check_same_thread=False: sync steps of an async workflow run in a thread pool.
    conn = sqlite3.connect(path, isolation_level=None, timeout=10, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE IF NOT EXISTS executions (step TEXT, key TEXT)")
    return conn


def main() -> None:
    global SLEEP_S
    journal, world_path, run_id, sleep_s = sys.argv[1:5]
    SLEEP_S = float(sleep_s)
    w = world(world_path)

    def effect(step: str, *, idempotency_key: str) -> str:
        w.execute("INSERT INTO executions VALUES (?, ?)", (step, idempotency_key))
        return f"{step} done"

    engine = durably.Engine(journal)

    @engine.workflow(name="two_timers")
    async def two_timers(ctx: durably.AsyncContext) -> dict[str, object]:
        before = await ctx.now()
        _, _, drafted = await ctx.gather(
            ctx.sleep(SLEEP_S), ctx.sleep(SLEEP_S + 1), ctx.step("draft", effect, "draft")
        )
        after = await ctx.now()
        posted = await ctx.step("post", effect, "post")
        return {"drafted": drafted, "posted": posted, "slept_s": (after - before).total_seconds()}

    print(json.dumps(engine.run(two_timers, run_id=run_id)))


if __name__ == "__main__":
    main()
