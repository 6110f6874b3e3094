"""Workflows for bench/fleet.py, loaded by ``durably worker bench_fleet_app:engine``."""

from __future__ import annotations

import os
import time
from typing import Any

import durably

STEPS = 10


def trivial(i: int) -> int:
    """A step that does nothing but return."""
    return i


def heartbeat_step(i: int, stamp_file: str) -> int:
    """Append a timestamp per live execution, so failover can be timed from outside."""
    with open(stamp_file, "a") as f:
        f.write(f"{os.getpid()} {i} {time.time()}\n")
    time.sleep(0.05)
    return i


def make_engine() -> durably.Engine:
    """The bench engine, on DURABLY_URL with FLEET_LEASE_S."""
    lease_s = float(os.environ.get("FLEET_LEASE_S", "30"))
    engine = durably.Engine(lease_s=lease_s, heartbeat_s=lease_s / 4)

    @engine.workflow(name="ten")
    def ten(ctx: durably.Context, n: int) -> int:
        for i in range(STEPS):
            ctx.step("s", trivial, i)
        return n

    @engine.workflow(name="ticker")
    def ticker(ctx: durably.Context, stamp_file: str, ticks: int) -> int:
        for i in range(ticks):
            ctx.step("tick", heartbeat_step, i, stamp_file)
        return ticks

    return engine


_engine: durably.Engine | None = None


def __getattr__(name: str) -> Any:
    global _engine
    if name == "engine":
        if _engine is None:
            _engine = make_engine()
        return _engine
    raise AttributeError(name)
