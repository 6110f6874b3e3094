"""A small ticketing service whose ticket creation is protected by idempotency keys.

``POST /tickets`` with ``{"title": ..., "priority": "low" | "normal" | "high"}`` and an
``Idempotency-Key`` header creates one ticket row in the service's own SQLite database,
however often the client retries. Run it with::

    pip install 'durably[http]'
    python examples/ticketing_service.py --port 8000
    curl -i -X POST localhost:8000/tickets -H 'Idempotency-Key: 7d1c0e' \\
         -H 'content-type: application/json' -d '{"title": "disk full on db-3"}'

Send the same curl again: the response is the same ticket, with ``Idempotent-Replayed:
true``, and no second row. Change the body and keep the key: 422. Leave the key out: 400.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import time
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from durably.idempotency import IdempotencyMiddleware, IdempotencyStore, migrate

PRIORITIES = ("low", "normal", "high")
TITLE_CHARS_MAX = 200

SCHEMA = """
CREATE TABLE IF NOT EXISTS tickets (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    title      TEXT NOT NULL,
    priority   TEXT NOT NULL,
    created_at REAL NOT NULL
)
"""


class TicketDB:
    """The service's own state: one SQLite file, one connection per call (simple and safe)."""

    def __init__(self, path: str) -> None:
        self.path = path
        with self._connect() as conn:
            conn.execute(SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=5.0)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.row_factory = sqlite3.Row
        return conn

    def create(self, title: str, priority: str) -> dict[str, Any]:
        """Insert a ticket and return it; the commit is durable before the response."""
        with self._connect() as conn:
            cur = conn.execute(
                "INSERT INTO tickets (title, priority, created_at) VALUES (?, ?, ?)",
                (title, priority, time.time()),
            )
            ticket_id = cur.lastrowid
        return {"id": ticket_id, "title": title, "priority": priority}

    def list(self) -> list[dict[str, Any]]:
        """Return every ticket, oldest first."""
        with self._connect() as conn:
            rows = conn.execute("SELECT id, title, priority FROM tickets ORDER BY id").fetchall()
        return [dict(row) for row in rows]


def _bad_request(detail: str) -> Response:
    body = {"type": "about:blank", "title": "Bad Request", "status": 400, "detail": detail}
    return Response(json.dumps(body), status_code=400, media_type="application/problem+json")


def create_app(
    db_path: str,
    store: IdempotencyStore,
    *,
    require_key: bool = True,
    before_insert: Callable[[dict[str, Any]], Awaitable[None]] | None = None,
) -> IdempotencyMiddleware:
    """Build the service: a Starlette app wrapped in the idempotency middleware.

    ``before_insert`` is awaited with the validated ticket just before it is written; tests
    use it to make a request slow (to observe 409s, or to kill the server mid-request).
    """
    tickets = TicketDB(db_path)

    async def create_ticket(request: Request) -> Response:
        try:
            data = await request.json()
        except ValueError:
            return _bad_request("the body must be JSON")
        if not isinstance(data, dict):
            return _bad_request("the body must be a JSON object")
        title = data.get("title")
        priority = data.get("priority", "normal")
        if not isinstance(title, str) or not 1 <= len(title) <= TITLE_CHARS_MAX:
            return _bad_request(f"title must be a string of 1 to {TITLE_CHARS_MAX} characters")
        if priority not in PRIORITIES:
            return _bad_request(f"priority must be one of {', '.join(PRIORITIES)}")
        if before_insert is not None:
            await before_insert({"title": title, "priority": priority})
        # sqlite3 blocks, so it runs in a thread and the event loop keeps serving others.
        ticket = await run_in_threadpool(tickets.create, title, priority)
        return JSONResponse(
            ticket, status_code=201, headers={"location": f"/tickets/{ticket['id']}"}
        )

    async def list_tickets(request: Request) -> Response:
        return JSONResponse(await run_in_threadpool(tickets.list))

    async def health(request: Request) -> Response:
        return JSONResponse({"ok": True})

    app = Starlette(
        routes=[
            Route("/tickets", create_ticket, methods=["POST"]),
            Route("/tickets", list_tickets, methods=["GET"]),
            Route("/healthz", health, methods=["GET"]),
        ]
    )
    # One tenant: every caller of this demo is the same party. A service with several
    # clients passes scope_of= (the authenticated client) instead; see docs/idempotency.md.
    return IdempotencyMiddleware(app, store=store, single_tenant=True, require_key=require_key)


def main(argv: list[str] | None = None) -> None:
    """Run the service with uvicorn."""
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default="tickets.db", help="the service's own SQLite file")
    parser.add_argument(
        "--idempotency-db",
        default="sqlite:///idempotency.db",
        help="URL of the idempotency store (sqlite:///... or postgresql://...)",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args(argv)
    # The demo creates its tables itself; a deploy runs `durably migrate --idempotency
    # --db URL` once as the owner role, and the service runs with row privileges only.
    migrate(args.idempotency_db)
    store = IdempotencyStore(args.idempotency_db)
    try:
        uvicorn.run(create_app(args.db, store), host=args.host, port=args.port)
    finally:
        store.close()


if __name__ == "__main__":
    main()
