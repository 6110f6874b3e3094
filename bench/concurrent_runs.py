"""Throughput of many concurrent runs in one process against the raw single-commit rate
measured beside it (issue 28: >= 3x in power mode, with group commit).

Each round (interleaved) measures the raw rate (one thread, INSERT+COMMIT in WAL at
``synchronous=FULL``: commits per second) and then RUNS threads each driving one run of
STEPS trivial steps through one engine (steps per second, all runs together), and prints
the medians, their ratio and how many appends the shared commits carried.

    python bench/concurrent_runs.py [--runs 100] [--steps 20] [--rounds 5] [--mode power]
        [--async] [--pg postgresql://...]

``--async``: the runs are asyncio tasks on one event loop (an async workflow whose step is
an async function, ``await engine.run_async(...)``) instead of threads; their appends
join one commit per turn of the loop (:mod:`durably.runtime.joincommit`).

With ``--pg`` the journal is a throwaway schema of that server, and the raw rate is one
psycopg INSERT + COMMIT per row with ``synchronous_commit`` on.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import durably
from durability_modes import raw_pg_s, raw_sqlite_s


def trivial(i: int) -> dict[str, int]:
    """The benchmark's step: does nothing but return a small dict."""
    return {"i": i}


def concurrent_steps_per_s(url: str, runs: int, steps: int, mode: str) -> tuple[float, float]:
    """All runs' steps per second, and the mean appends per shared commit."""
    # Power mode passes no durability=, so the same script runs against a tree without it.
    engine = durably.Engine(url, **({} if mode == "power" else {"durability": mode}))

    @engine.workflow(name="bench")
    def many(ctx: durably.Context, n: int) -> int:
        for i in range(n):
            ctx.step("s", trivial, i)
        return n

    tag = uuid.uuid4().hex[:6]
    start = threading.Barrier(runs + 1)

    def one(k: int) -> None:
        start.wait()
        engine.run(many, steps, run_id=f"{tag}-{k}")

    threads = [threading.Thread(target=one, args=(k,)) for k in range(runs)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    group = getattr(engine.store, "_group", None)
    per_batch = group.batched / group.batches if group is not None and group.batches else 1.0
    engine.close()
    return runs * steps / elapsed, per_batch


async def _trivial_async(i: int) -> dict[str, int]:
    """The async benchmark's step."""
    return {"i": i}


def concurrent_async_steps_per_s(url: str, runs: int, steps: int, mode: str) -> tuple[float, float]:
    """:func:`concurrent_steps_per_s` with the runs as asyncio tasks on one loop."""
    import asyncio

    engine = durably.Engine(url, **({} if mode == "power" else {"durability": mode}))

    @engine.workflow(name="bench_async")
    async def many(ctx: durably.AsyncContext, n: int) -> int:
        for i in range(n):
            await ctx.step("s", _trivial_async, i)
        return n

    tag = uuid.uuid4().hex[:6]

    async def all_runs() -> float:
        t0 = time.perf_counter()
        await asyncio.gather(
            *(engine.run_async(many, steps, run_id=f"{tag}-{k}") for k in range(runs))
        )
        return time.perf_counter() - t0

    elapsed = asyncio.run(all_runs())
    group = getattr(engine.store, "_group", None)
    per_batch = group.batched / group.batches if group is not None and group.batches else 1.0
    engine.close()
    return runs * steps / elapsed, per_batch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--mode", default="power", choices=("power", "process", "effects"))
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--pg", default=None, help="a PostgreSQL server URL")
    parser.add_argument("--async", dest="use_async", action="store_true", help="asyncio runs")
    args = parser.parse_args()
    measure = concurrent_async_steps_per_s if args.use_async else concurrent_steps_per_s
    raw, rate, batch = [], [], []
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp, contextlib.ExitStack() as stack:
        pg = None
        if args.pg:
            from pg_step_overhead import throwaway_schema

            pg = stack.enter_context(throwaway_schema(args.pg))
        for r in range(args.rounds):
            if pg:
                raw.append(1 / raw_pg_s(pg, "on", 500))
                url = pg
            else:
                raw.append(1 / raw_sqlite_s(Path(tmp) / f"raw-{r}.db", "FULL", 500))
                url = f"sqlite:///{Path(tmp) / f'j-{r}.db'}"
            steps, per = measure(url, args.runs, args.steps, args.mode)
            rate.append(steps)
            batch.append(per)
    raw_m, rate_m = statistics.median(raw), statistics.median(rate)
    kind = "asyncio tasks" if args.use_async else "threads"
    print(f"medians of {args.rounds} interleaved rounds ({args.mode} mode, runs as {kind})")
    print(f"  raw single-commit rate ({'pg' if pg else 'sqlite FULL'})   {raw_m:8.0f} commits/s")
    print(
        f"  concurrent runs, steps/s               {rate_m:8.0f} ({args.runs} x {args.steps} steps)"
    )
    print(f"  appends per shared commit (batches)     {statistics.median(batch):8.1f}")
    print(f"  ratio (target >= 3 in power mode)       {rate_m / raw_m:8.2f}x")


if __name__ == "__main__":
    main()
