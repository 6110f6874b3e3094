"""The agent of the signal crash test: ``python signal_agent.py JOURNAL_URL WORLD_DB
RUN_ID [KILL_AT]`` opens a ticket (an effect, counted in the world database), waits for
signal ``approve`` (``engine.run`` waits in this process while the run is parked), then
posts the decision (another counted effect). Prints the result as JSON.

``KILL_AT`` (``POSITION:WINDOW``) SIGKILLs this process when that step reaches that
window: ``2:before`` dies after the wait took its signal and before anything recorded
it (the wait's record rides with the next step's write).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import sys

import durably


def world(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, timeout=10)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE IF NOT EXISTS executions (step TEXT, key TEXT)")
    return conn


def main() -> None:
    journal, world_path, run_id = sys.argv[1:4]
    kill_at = tuple(sys.argv[4].split(":")) if len(sys.argv) > 4 else None
    w = world(world_path)

    def effect(step: str, detail: object, *, idempotency_key: str) -> str:
        w.execute("INSERT INTO executions VALUES (?, ?)", (step, idempotency_key))
        return f"{step} done ({detail})"

    def hook(run: str, pos: str, name: str, window: str) -> None:
        if (pos, window) == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    engine = durably.Engine(journal, fault_hook=hook)

    @engine.workflow(name="change")
    def change(ctx: durably.Context, ticket: str) -> dict[str, object]:
        opened = ctx.step("open_ticket", effect, "open_ticket", ticket)
        decision = ctx.wait_for_signal("approve", timeout_s=600)
        posted = ctx.step("post_status", effect, "post_status", decision)
        return {"ticket": ticket, "opened": opened, "decision": decision, "posted": posted}

    print(json.dumps(engine.run(change, "T-9", run_id=run_id)))


if __name__ == "__main__":
    main()
