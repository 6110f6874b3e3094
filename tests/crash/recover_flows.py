"""The workflow of the ``durably recover`` crash tests, registered on any engine.

``RECOVER_WORLD`` is a SQLite file standing in for the outside world: a receiver that
deduplicates on the idempotency key and counts every request.
"""

from __future__ import annotations

import os
import sqlite3

import durably


def _world() -> sqlite3.Connection:
    conn = sqlite3.connect(os.environ["RECOVER_WORLD"], isolation_level=None, timeout=10)
    conn.execute(
        "CREATE TABLE IF NOT EXISTS effects (key TEXT PRIMARY KEY, requests INTEGER NOT NULL)"
    )
    return conn


@durably.step(effect=True)
def charge(amount: int, *, idempotency_key: str) -> str:
    """The receiving side honours the key: a repeated key changes nothing but a count."""
    with _world() as w:
        w.execute(
            "INSERT INTO effects VALUES (?, 1)"
            " ON CONFLICT (key) DO UPDATE SET requests = requests + 1",
            (idempotency_key,),
        )
    return f"charged {amount}"


def register(engine: durably.Engine) -> durably.Workflow:
    """Register the ``pay`` workflow on ``engine``."""

    @engine.workflow(name="pay")
    def pay(ctx: durably.Context, amount: int) -> list[str]:
        first = ctx.step("charge", charge, amount)  # 0
        second = ctx.step("charge_fee", charge, 1)  # 1
        return [first, second]

    return pay
