"""Parked runs cost rows, not threads or slots: a worker with 1,000 runs parked on timers,
then 1,000 parked on a signal, and the time from a signal to the run's next live step.

For each store, one ``durably worker`` process (4 slots) drives 1,000 runs that each
record a step and park on an hour's timer. Printed: the worker's threads and resident
memory (``/proc/PID/status``) when idle (after one warm-up run), with a tenth of the runs
parked and with all 1,000 parked (its pool holds at most 4 run threads, however many runs
are parked), how long the 1,000 took to park, and how long a new one-step run then takes
to complete (the slots are free: a parked run holds none).

Signals, on a fresh journal and worker: the worker's threads and RSS idle after driving
1,000 short runs to their end (the baseline: slots' threads started, caches warm) and
with 1,000 more parked on ``ctx.wait_for_signal``; then the time from ``engine.signal``
(in this process) to the woken run's next live step (the time that step recorded),
median of ``--samples`` signals, against ``engine.start`` of a new run to its first live
step on the same worker (the same claim path, from a queued run).

Run: ``python bench/parked.py [--runs N] [--samples N] [--pg URL]`` (Linux: reads /proc).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import durably  # noqa: E402


def spawn(url: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "DURABLY_URL": url, "PYTHONPATH": str(HERE)}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "durably.cli",
            "worker",
            "bench_parked_app:engine",
            "--concurrency",
            "4",
            "--poll-interval-s",
            "0.05",
            "--drain-s",
            "1",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=HERE,
    )


def proc_status(pid: int) -> tuple[int, float]:
    """The process's thread count and resident memory in MiB."""
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    return int(fields["Threads"]), int(fields["VmRSS"].split()[0]) / 1024


def wait_for(what: str, cond: object, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.05)


def measure(url: str, runs: int) -> dict[str, float]:
    os.environ["DURABLY_URL"] = url
    import bench_parked_app as app

    engine = durably.Engine(url)
    for name in ("nap", "quick"):
        engine.workflow(name=name)(getattr(app, name).fn)
    worker = spawn(url)
    try:
        # Warm up: the worker's pool and connections exist before the idle figure.
        engine.start("quick", -1, run_id="warm").result(timeout_s=60)
        time.sleep(0.5)
        idle = proc_status(worker.pid)
        t0 = time.perf_counter()
        few = runs // 10
        figures = []
        for lo, hi in ((0, few), (few, runs)):
            for i in range(lo, hi):
                engine.start("nap", i, run_id=f"nap-{i}")
            wait_for(
                f"{hi} runs parked",
                lambda n=hi: engine.store.count_runs(workflow="nap").get("parked", 0) == n,
            )
            park_s = time.perf_counter() - t0
            time.sleep(0.5)
            figures.append(proc_status(worker.pid))
        some, parked = figures
        t1 = time.perf_counter()
        engine.start("quick", 1, run_id="after").result(timeout_s=60)
        quick_s = time.perf_counter() - t1
        return {
            "idle_threads": idle[0],
            "idle_rss": idle[1],
            "some": few,
            "some_threads": some[0],
            "some_rss": some[1],
            "parked_threads": parked[0],
            "parked_rss": parked[1],
            "park_s": park_s,
            "quick_ms": quick_s * 1000,
        }
    finally:
        worker.terminate()
        worker.wait(30)
        engine.close()


def step_time(engine: durably.Engine, run_id: str, position: str) -> float:
    """The time the run's step at ``position`` recorded (its output), waiting for it."""
    while True:
        for r in engine.store.load_history(run_id, 0):
            if r.position == position and r.status == "ok" and r.output is not None:
                return float(r.output)
        time.sleep(0.001)


def measure_signals(url: str, runs: int, samples: int) -> dict[str, float]:
    os.environ["DURABLY_URL"] = url
    import bench_parked_app as app

    engine = durably.Engine(url)
    for name in ("waiter", "starter"):
        engine.workflow(name=name)(getattr(app, name).fn)
    worker = spawn(url)
    try:
        # The baseline: idle after as many finished runs as will park below.
        for i in range(runs):
            engine.start("starter", i, run_id=f"done-{i}")
        wait_for(
            f"{runs} finished runs",
            lambda: engine.store.count_runs(workflow="starter").get("completed", 0) == runs,
        )
        time.sleep(0.5)
        idle = proc_status(worker.pid)
        t0 = time.perf_counter()
        for i in range(runs):
            engine.start("waiter", i, run_id=f"wait-{i}")
        wait_for(
            f"{runs} runs parked on a signal",
            lambda: engine.store.count_runs(workflow="waiter").get("parked", 0) == runs,
        )
        park_s = time.perf_counter() - t0
        time.sleep(0.5)
        parked = proc_status(worker.pid)
        wake, start = [], []
        for i in range(samples):
            sent = time.time()
            engine.signal(f"wait-{i}", "go")
            wake.append(step_time(engine, f"wait-{i}", "1") - sent)
        for i in range(samples):
            sent = time.time()
            engine.start("starter", i, run_id=f"new-{i}")
            start.append(step_time(engine, f"new-{i}", "0") - sent)
        return {
            "idle_threads": idle[0],
            "idle_rss": idle[1],
            "parked_threads": parked[0],
            "parked_rss": parked[1],
            "park_s": park_s,
            "wake_ms": statistics.median(wake) * 1000,
            "start_ms": statistics.median(start) * 1000,
        }
    finally:
        worker.terminate()
        worker.wait(30)
        engine.close()


def main() -> None:
    """Print the figures."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=1000)
    p.add_argument("--samples", type=int, default=20)
    p.add_argument("--pg", help="PostgreSQL server URL (a throwaway schema is used)")
    args = p.parse_args()
    results, signals = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        results["SQLite"] = measure(f"sqlite:///{tmp}/parked.db", args.runs)
        signals["SQLite"] = measure_signals(f"sqlite:///{tmp}/signals.db", args.runs, args.samples)
    if args.pg:
        from pg_step_overhead import throwaway_schema

        with throwaway_schema(args.pg) as url:
            results["PostgreSQL"] = measure(url, args.runs)
        with throwaway_schema(args.pg) as url:
            signals["PostgreSQL"] = measure_signals(url, args.runs, args.samples)
    print(f"{args.runs:,} runs parked on a timer, one worker with 4 slots, {os.cpu_count()} cores")
    for store, r in results.items():
        print(
            f"  {store}: threads {r['idle_threads']:.0f} idle, {r['some_threads']:.0f} with"
            f" {r['some']:.0f} parked, {r['parked_threads']:.0f} with all parked; RSS"
            f" {r['idle_rss']:.1f} / {r['some_rss']:.1f} / {r['parked_rss']:.1f} MiB;"
            f" parked in {r['park_s']:.1f} s; a new one-step run then took"
            f" {r['quick_ms']:.0f} ms"
        )
    print(f"{args.runs:,} runs parked on a signal, the same worker set-up")
    for store, r in signals.items():
        print(
            f"  {store}: threads {r['idle_threads']:.0f} idle after {args.runs:,} finished"
            f" runs, {r['parked_threads']:.0f} with {args.runs:,} parked on a signal; RSS"
            f" {r['idle_rss']:.1f} / {r['parked_rss']:.1f} MiB (ratio"
            f" {r['parked_rss'] / r['idle_rss']:.2f}); parked in {r['park_s']:.1f} s"
        )
        print(
            f"  {store}: engine.signal -> next live step, median of {args.samples}:"
            f" {r['wake_ms']:.1f} ms; engine.start -> first live step (baseline):"
            f" {r['start_ms']:.1f} ms; ratio {r['wake_ms'] / r['start_ms']:.2f}"
        )


if __name__ == "__main__":
    main()
