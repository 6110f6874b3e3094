"""The agent of the timer crash test: ``python timer_agent.py JOURNAL_URL WORLD_DB RUN_ID
SLEEP_S`` opens a ticket (an effect, counted in the world database), sleeps ``SLEEP_S``
seconds with ``ctx.sleep`` (``engine.run`` waits in this process while the run is
parked), then posts a status (another counted effect). Prints the result as JSON.

``SLEEP_S`` is read by the code, not passed as the workflow's input: the test restarts
the agent with another duration to show that a run keeps the wake time it recorded.
"""

from __future__ import annotations

import json
import sqlite3
import sys

import durably

SLEEP_S = 0.0


def world(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, timeout=10)
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

    @engine.workflow(name="follow_up")
    def follow_up(ctx: durably.Context, ticket: str) -> dict[str, object]:
        opened = ctx.step("open_ticket", effect, "open_ticket")
        before = ctx.now()
        ctx.sleep(SLEEP_S)
        after = ctx.now()
        posted = ctx.step("post_status", effect, "post_status")
        return {
            "ticket": ticket,
            "opened": opened,
            "posted": posted,
            "slept_s": (after - before).total_seconds(),
        }

    print(json.dumps(engine.run(follow_up, "T-1", run_id=run_id)))


if __name__ == "__main__":
    main()
