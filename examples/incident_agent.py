"""An incident-response agent made durable with durably.

Five turns, each a (scripted) model call then a tool call; three tools write to the
outside world, which lives in its own SQLite file and honours idempotency keys. Run it,
kill it with SIGKILL at any moment, run it again with the same run id: recorded steps
replay, the first unrecorded one goes live, and no ticket or page is made twice.

    python examples/incident_agent.py --db sqlite:///agent.db --world world.db alert-42
"""

from __future__ import annotations

import argparse
import sqlite3
import time
from typing import Any

import durably

MODEL_LATENCY_S = 0.4  # a scripted model still takes a while, like a real one


class World:
    """The outside world: tickets, pages and status posts, deduplicated on the key."""

    def __init__(self, path: str) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None, timeout=10)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS writes (id INTEGER PRIMARY KEY, kind TEXT,"
            " body TEXT, idempotency_key TEXT UNIQUE, requests INTEGER NOT NULL DEFAULT 1)"
        )

    def write(self, kind: str, body: str, key: str) -> str:
        """Create a record once per key; a repeated key returns the first record."""
        self.conn.execute(
            "INSERT INTO writes (kind, body, idempotency_key) VALUES (?, ?, ?)"
            " ON CONFLICT (idempotency_key) DO UPDATE SET requests = requests + 1",
            (kind, body, key),
        )
        (row_id,) = self.conn.execute(
            "SELECT id FROM writes WHERE idempotency_key = ?", (key,)
        ).fetchone()
        return f"{kind.upper()}-{row_id}"


def build(engine: durably.Engine, world: World) -> durably.Workflow:
    """Register the agent's workflow on ``engine``."""

    def say(text: str) -> None:
        print(f"  live: {text}", flush=True)

    def model(turn: int, context: str) -> dict[str, Any]:
        say(f"model call, turn {turn}")
        time.sleep(MODEL_LATENCY_S)
        tokens = 4_400 + 1_500 * (turn - 1)
        durably.usage(tokens=tokens)
        return {"turn": turn, "decision": f"decision {turn} given {len(context)} chars"}

    def fetch_alert(alert_id: str) -> dict[str, str]:
        say("fetch the alert")
        return {"id": alert_id, "summary": "disk 97% full on db-3"}

    @durably.step(effect=True, retries=2, backoff=0.2)
    def open_ticket(title: str, *, idempotency_key: str) -> str:
        say(f"open a ticket (key {idempotency_key})")
        return world.write("ticket", title, idempotency_key)

    @durably.step(effect=True, retries=2, backoff=0.2)
    def page_oncall(ticket: str, *, idempotency_key: str) -> str:
        say(f"page on-call (key {idempotency_key})")
        return world.write("page", ticket, idempotency_key)

    def query_logs(host: str) -> list[str]:
        say("query logs")
        return [f"{host}: wal archive stalled", f"{host}: 40 GB in pg_wal"]

    @durably.step(effect=True, retries=2, backoff=0.2)
    def post_status(text: str, *, idempotency_key: str) -> str:
        say(f"post a status update (key {idempotency_key})")
        return world.write("status", text, idempotency_key)

    @engine.workflow(name="incident", version="1")
    def incident(ctx: durably.Context, alert_id: str) -> dict[str, Any]:
        ctx.step("model", model, 1, alert_id)
        alert = ctx.step("fetch_alert", fetch_alert, alert_id)
        ctx.step("model", model, 2, alert["summary"])
        ticket = ctx.step("open_ticket", open_ticket, alert["summary"])
        ctx.step("model", model, 3, ticket)
        page = ctx.step("page_oncall", page_oncall, ticket)
        ctx.step("model", model, 4, page)
        logs = ctx.step("query_logs", query_logs, "db-3")
        ctx.step("model", model, 5, "\n".join(logs))
        started = ctx.now()
        status = ctx.step(
            "post_status", post_status, f"{ticket}: mitigating since {started:%H:%M} UTC"
        )
        return {"ticket": ticket, "page": page, "status": status}

    return incident


def main() -> None:
    """Run (or resume) one incident."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_id")
    p.add_argument("--db", default="sqlite:///agent.db")
    p.add_argument("--world", default="world.db")
    args = p.parse_args()
    engine = durably.Engine(args.db)
    wf = build(engine, World(args.world))
    result = engine.run(wf, args.run_id, run_id=args.run_id)
    print(f"result: {result}", flush=True)


if __name__ == "__main__":
    main()
