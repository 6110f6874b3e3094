"""An agent that opens tickets in a service it calls over HTTP, with its step keys.

The ticket step sends durably's idempotency key (``"<run_id>:<incarnation>:<position>"``)
as the ``Idempotency-Key`` header. The service (examples/ticketing_service.py, protected by
``durably.idempotency.IdempotencyMiddleware``) stores its first response per key, so a
crash after the ticket was made but before durably recorded it costs nothing: the resumed
step sends the same key and gets the same ticket back, marked ``Idempotent-Replayed``.

    python examples/ticketing_service.py --port 8000 &
    python examples/ticketing_agent.py alert-7 --service http://127.0.0.1:8000
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import urllib.error
import urllib.request
from typing import Any

import durably


class ServiceError(Exception):
    """The ticketing service refused the request (a 4xx: retrying will not help)."""


def post_json(url: str, body: dict[str, Any], key: str) -> tuple[int, dict[str, Any], bool]:
    """POST ``body`` with an Idempotency-Key; return status, JSON body, and replayed."""
    req = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"content-type": "application/json", "Idempotency-Key": key},
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            replayed = resp.headers.get("Idempotent-Replayed") == "true"
            return resp.status, json.loads(resp.read()), replayed
    except urllib.error.HTTPError as err:
        if err.code == 409:  # the first attempt with this key is still in flight: retry
            raise ConnectionError(f"{url}: request with key {key} still in flight") from err
        if 400 <= err.code < 500:
            raise ServiceError(f"{url}: HTTP {err.code}: {err.read().decode()[:300]}") from err
        raise


def build(engine: durably.Engine, service: str) -> durably.Workflow:
    """Register the agent's workflow for the service at ``service``."""

    def triage(alert: str) -> dict[str, str]:
        return {"title": f"[sev2] {alert}", "priority": "high"}

    @durably.step(effect=True, retries=5, backoff=0.2, no_retry=(ServiceError,))
    def open_ticket(title: str, priority: str, *, idempotency_key: str) -> dict[str, Any]:
        status, ticket, replayed = post_json(
            f"{service}/tickets", {"title": title, "priority": priority}, idempotency_key
        )
        return {"id": ticket["id"], "status": status, "replayed": replayed}

    @engine.workflow(name="ticketing-agent", version="1")
    def agent(ctx: durably.Context, alert: str) -> dict[str, Any]:
        plan = ctx.step("triage", triage, alert)
        ticket = ctx.step("open_ticket", open_ticket, plan["title"], plan["priority"])
        return {"ticket": ticket["id"], "replayed": ticket["replayed"]}

    return agent


def main() -> None:
    """Run or resume one alert."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_id")
    p.add_argument("--service", default="http://127.0.0.1:8000")
    p.add_argument("--db", default="sqlite:///ticketing-agent.db")
    p.add_argument(
        "--crash-at",
        metavar="POSITION:WINDOW",
        help="SIGKILL this process when that step reaches that window"
        " (before, effect, recorded): for crash demos and tests",
    )
    args = p.parse_args()
    hook = None
    if args.crash_at:
        target = tuple(args.crash_at.split(":"))

        def hook(run_id: str, position: str, name: str, window: str) -> None:
            if (position, window) == target:
                os.kill(os.getpid(), signal.SIGKILL)

    engine = durably.Engine(args.db, fault_hook=hook)
    result = engine.run(build(engine, args.service), f"alert {args.run_id}", run_id=args.run_id)
    print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    main()
