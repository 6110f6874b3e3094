"""Per-chunk cost of ``ctx.step_stream`` against iterating the same generator bare.

Prints, from one run: the time per chunk of a generator iterated directly (the baseline),
through a live ``ctx.step_stream`` (sync workflow; async workflow with an async generator;
async workflow with a sync generator, pulled in a step thread) and through a replay of
the recorded stream, each with its ratio to the baseline and the one commit per stream
included. A model's tokens arrive every few milliseconds, so what matters is that the
per-chunk cost stays in microseconds.

Run: ``python bench/step_stream.py [--chunks N] [--rounds R] [--dir PATH]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import durably


def tokens(n: int) -> Iterator[str]:
    """The benchmark's stream: n short text chunks, made instantly."""
    for i in range(n):
        yield f"tok{i} "


async def atokens(n: int) -> AsyncIterator[str]:
    """The async variant of :func:`tokens`."""
    for i in range(n):
        yield f"tok{i} "


def bare_s(n: int) -> float:
    t0 = time.perf_counter()
    for _ in tokens(n):
        pass
    return time.perf_counter() - t0


class Crash(BaseException):
    """Stops a run after its stream, so the next run replays it."""


def timed_runs(engine: durably.Engine, n: int, rounds: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"sync": [], "async": [], "async+thread": [], "replay": []}

    @engine.workflow(name="sync")
    def sync_wf(ctx: durably.Context, n: int) -> int:
        count = sum(1 for _ in ctx.step_stream("s", tokens, n))
        ctx.step("after", int)
        return count

    @engine.workflow(name="async")
    async def async_wf(ctx: durably.AsyncContext, n: int, fn: str) -> int:
        f: Any = atokens if fn == "async" else tokens
        count = 0
        async for _ in ctx.step_stream("s", f, n):
            count += 1
        return count

    def stop_after_stream(run_id: str, pos: str, name: str, window: str) -> None:
        if (pos, window) == ("1", "before"):
            raise Crash

    for r in range(rounds):
        engine.fault_hook = stop_after_stream
        t0 = time.perf_counter()
        try:
            engine.run(sync_wf, n, run_id=f"s{r}")
        except Crash:
            pass
        out["sync"].append(time.perf_counter() - t0)
        engine.fault_hook = None
        t0 = time.perf_counter()
        engine.run(sync_wf, n, run_id=f"s{r}")
        out["replay"].append(time.perf_counter() - t0)
        for kind in ("async", "async+thread"):
            fn = "async" if kind == "async" else "sync"
            t0 = time.perf_counter()
            asyncio.run(engine.run_async(async_wf, n, fn, run_id=f"{kind}{r}"))
            out[kind].append(time.perf_counter() - t0)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--chunks", type=int, default=20_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--dir")
    args = p.parse_args()
    n, rounds = args.chunks, args.rounds
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        engine = durably.Engine(f"sqlite:///{Path(d) / 'bench.db'}")
        try:
            base = statistics.median(bare_s(n) for _ in range(rounds))
            runs = timed_runs(engine, n, rounds)
        finally:
            engine.close()
    base_us = base / n * 1e6
    print(f"{n} chunks, median of {rounds} rounds (whole run: claim, commits, finish)")
    print(f"  bare generator            {base_us:8.2f} us/chunk")
    for kind, times in runs.items():
        us = statistics.median(times) / n * 1e6
        print(f"  step_stream {kind:<13} {us:8.2f} us/chunk  ({us / base_us:,.0f}x bare)")


if __name__ == "__main__":
    main()
