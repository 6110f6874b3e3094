"""Workflows for bench/parked.py, loaded by ``durably worker bench_parked_app:engine``."""

from __future__ import annotations

import time

import durably

engine = durably.Engine()  # on DURABLY_URL


@engine.workflow(name="nap")
def nap(ctx: durably.Context, i: int) -> int:
    """One step, then an hour's timer: the run parks."""
    ctx.step("plan", lambda: i)
    ctx.sleep(3600)
    return i


@engine.workflow(name="quick")
def quick(ctx: durably.Context, i: int) -> int:
    """One step: shows that a worker slot is free."""
    return int(ctx.step("only", lambda: i))


@engine.workflow(name="waiter")
def waiter(ctx: durably.Context, i: int) -> float:
    """Parks on a signal; once it comes, a step records when it ran (time.time())."""
    ctx.wait_for_signal("go")
    return float(ctx.step("woke", time.time))


@engine.workflow(name="starter")
def starter(ctx: durably.Context, i: int) -> float:
    """A step that records when it ran: the baseline of the wake-up time."""
    return float(ctx.step("started", time.time))
