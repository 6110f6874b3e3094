"""The agent of the continue-as-new crash test: ``python continue_agent.py JOURNAL_URL
WORLD_DB RUN_ID [KILL_AT]`` works through 7 mailbox items, one effect each (counted in
the world database with its idempotency key), and continues as new every 3 items, so
the run ends in generation 2. Prints the result as JSON.

``KILL_AT`` SIGKILLs this process at a point around the hand-over:
``POSITION:WINDOW`` at a step (``2:recorded``: generation 0's last step recorded, the
hand-over not begun; ``g1.0:before``: the hand-over committed, generation 1 not yet
begun its first step), or ``inside``: inside the hand-over's transaction, after its
last statement and before its commit.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import sys

import durably
import durably.store.generations as generations

EVERY = 3
ITEMS = 7


def world(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, timeout=10)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE IF NOT EXISTS executions (item INTEGER, key TEXT)")
    return conn


def main() -> None:
    journal, world_path, run_id = sys.argv[1:4]
    kill_at = sys.argv[4] if len(sys.argv) > 4 else None
    w = world(world_path)

    def handle(item: int, *, idempotency_key: str) -> str:
        w.execute("INSERT INTO executions VALUES (?, ?)", (item, idempotency_key))
        return f"item {item} done"

    def hook(run: str, pos: str, name: str, window: str) -> None:
        if f"{pos}:{window}" == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    if kill_at == "inside":
        # The hand-over's last statements ran (records, generations row, run row); the
        # row it returns is built before the events and the commit: die there.
        def die(row: object) -> None:
            os.kill(os.getpid(), signal.SIGKILL)

        generations.run_from_row = die  # type: ignore[assignment]

    engine = durably.Engine(journal, fault_hook=hook)

    @engine.workflow(name="mailbox")
    def mailbox(ctx: durably.Context, item: int, done: list[str]) -> list[str]:
        for _ in range(EVERY):
            if item == ITEMS:
                return done
            done = [*done, ctx.step("handle", handle, item)]
            item += 1
        ctx.now()  # a record riding with the hand-over itself
        return ctx.continue_as_new(item, done)

    print(json.dumps(engine.run(mailbox, 0, [], run_id=run_id)))


if __name__ == "__main__":
    main()
