"""The agent of the approval crash test: ``python approval_agent.py JOURNAL_URL WORLD_DB
RUN_ID KILL_WINDOW``. It plans (an effect), asks for approval of a refund with a one-second
timeout and ``on_timeout=escalate`` (an effect: a recorded step counted in the world
database), then notifies (another counted effect). ``engine.run`` waits in this process
while the run is parked. Nobody approves, so the request expires.

KILL_WINDOW (``before``, ``recorded`` or ``none``) is where this process SIGKILLs itself
inside the ``on_timeout:refund`` step (the engine's fault hook): ``before``, after the
store took the expiry and before the step ran; ``recorded``, after the step's result (and
the expired decision riding with it) committed. Prints the result as JSON.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import sys

import durably

ARGS = {"order": "A-17", "amount": 20}


def world(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, timeout=10)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE IF NOT EXISTS executions (step TEXT)")
    return conn


def main() -> None:
    journal, world_path, run_id, kill_window = sys.argv[1:5]
    w = world(world_path)

    def effect(step: str) -> str:
        w.execute("INSERT INTO executions VALUES (?)", (step,))
        return f"{step} done"

    def escalate() -> str:
        return effect("escalate")

    def hook(run: str, position: str, name: str, window: str) -> None:
        if name == "on_timeout:refund" and window == kill_window:
            os.kill(os.getpid(), signal.SIGKILL)

    engine = durably.Engine(journal, fault_hook=hook)

    @engine.workflow(name="refund")
    def refund(ctx: durably.Context) -> dict[str, object]:
        ctx.step("plan", effect, "plan")
        d = ctx.request_approval("refund", ARGS, timeout_s=1.0, on_timeout=escalate)
        notified = ctx.step("notify", effect, f"notify {d.outcome}")
        return {"outcome": d.outcome, "value": d.value, "notified": notified}

    print(json.dumps(engine.run(refund, run_id=run_id)))


if __name__ == "__main__":
    main()
