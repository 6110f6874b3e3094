"""The workflow the torture test runs on real worker processes under random chaos.

``durably worker torture_app:engine`` builds the engine from the environment:
``DURABLY_URL`` (journal), ``FLEET_WORLD`` (the world's SQLite file, separate from the
journal), ``FLEET_LEASE_S``. Every execution of every step is counted in the world with
its start time, so the test can tell a re-run of a step whose record was already written
(by an owner whose claim came after the record) from a legitimate re-run of a step whose
record was lost with its process, or a step already in flight in a stale owner.
"""

from __future__ import annotations

import os
import random
import sqlite3
import time
from typing import Any

from fleet_app import StaleToken, apply_effect, lazy_engine

import durably


def world() -> sqlite3.Connection:
    conn = sqlite3.connect(os.environ["FLEET_WORLD"], isolation_level=None, timeout=60)
    conn.execute("PRAGMA busy_timeout=60000")
    return conn


def init_world(path: str) -> None:
    """The world's tables: effects by key (fleet_app's) and every execution of a step."""
    from fleet_app import init_world as init_fleet_world

    init_fleet_world(path)
    with sqlite3.connect(path, isolation_level=None) as conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS runs_of"
            " (run_id TEXT, step TEXT, started REAL, pid INT, token INT)"
        )


def _ran(run_id: str, step: str, token: int) -> None:
    started = time.time()
    w = world()
    try:
        w.execute(
            "INSERT INTO runs_of VALUES (?, ?, ?, ?, ?)",
            (run_id, step, started, os.getpid(), token),
        )
    finally:
        w.close()
    time.sleep(random.uniform(0, 0.1))  # room for chaos to land mid-step


def compute(run_id: str, step: str, n: int, *, fencing_token: int) -> int:
    _ran(run_id, step, fencing_token)
    return n * 7


@durably.step(effect=True, retries=5, backoff=0.05, no_retry=(StaleToken,))
def keyed(run_id: str, step: str, *, idempotency_key: str, fencing_token: int) -> str:
    _ran(run_id, step, fencing_token)
    return apply_effect(run_id, idempotency_key, fencing_token)


@durably.step(effect=True)
def unkeyed(run_id: str, step: str, *, fencing_token: int) -> str:
    """An effect with no key: after a crash between its intent and its result the run
    must park in doubt, never run it again."""
    _ran(run_id, step, fencing_token)
    return "sent"


def make_engine(url: str | None = None) -> durably.Engine:
    lease_s = float(os.environ.get("FLEET_LEASE_S", "2"))
    engine = durably.Engine(url, lease_s=lease_s, heartbeat_s=lease_s / 4, store_retry_s=30)

    @engine.workflow(name="torture")
    def torture(ctx: durably.Context, n: int) -> dict[str, Any]:
        rid = ctx.run_id
        a = ctx.step("prep", compute, rid, "prep", n)
        k1 = ctx.step("charge", keyed, rid, "charge")
        b = ctx.step("mid", compute, rid, "mid", a)
        u = ctx.step("notify", unkeyed, rid, "notify")
        k2 = ctx.step("refund", keyed, rid, "refund")
        c = ctx.step("post", compute, rid, "post", b)
        return {"k": [k1, k2], "u": u, "n": c}

    return engine


__getattr__ = lazy_engine(make_engine)
