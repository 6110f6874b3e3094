"""Run examples/ticketing_service.py under uvicorn for the HTTP tests.

The store's clock is real time plus an offset read from ``--clock-file`` on every call, so
a test can move the server's time without sleeping. Tickets whose title starts with "slow"
pause ``--pause-s`` seconds before they are written (after creating ``--pause-file``), so a
test can observe a request in flight or SIGKILL the server in the middle of one. The server
binds port 0 and writes the port it got to ``--port-file``.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path
from typing import Any

from idem_helpers import serve

from durably.idempotency import IdempotencyStore, migrate
from ticketing_service import create_app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True)
    parser.add_argument("--idem-url", required=True)
    parser.add_argument("--clock-file", required=True)
    parser.add_argument("--pause-file", required=True)
    parser.add_argument("--port-file", required=True)
    parser.add_argument("--pause-s", type=float, default=0.0)
    parser.add_argument("--lease-s", type=float, default=5.0)
    parser.add_argument("--ttl-s", type=float, default=3600.0)
    args = parser.parse_args()
    clock_file = Path(args.clock_file)

    def clock() -> float:
        try:
            offset = float(clock_file.read_text() or 0)
        except FileNotFoundError:
            offset = 0.0
        return time.time() + offset

    async def before_insert(ticket: dict[str, Any]) -> None:
        if ticket["title"].startswith("slow") and args.pause_s > 0:
            Path(args.pause_file).write_text(ticket["title"])
            await asyncio.sleep(args.pause_s)

    migrate(args.idem_url)  # a deploy runs `durably migrate --idempotency` instead
    store = IdempotencyStore(args.idem_url, clock=clock, lease_s=args.lease_s, ttl_s=args.ttl_s)
    app = create_app(args.db, store, before_insert=before_insert)
    serve(app, args.port_file)


if __name__ == "__main__":
    main()
