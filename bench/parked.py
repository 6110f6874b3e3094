"""Parked runs cost rows, not threads or slots: a worker with 1,000 runs parked on timers.

For each store, one ``durably worker`` process (4 slots) drives 1,000 runs that each
record a step and park on an hour's timer. Printed: the worker's threads and resident
memory (``/proc/PID/status``) when idle (after one warm-up run), with a tenth of the runs
parked and with all 1,000 parked (its pool holds at most 4 run threads, however many runs
are parked), how long the 1,000 took to park, and how long a new one-step run then takes
to complete (the slots are free: a parked run holds none).

Run: ``python bench/parked.py [--runs N] [--pg URL]`` (Linux: reads /proc).
"""

from __future__ import annotations

import argparse
import os
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


def main() -> None:
    """Print the figures."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=1000)
    p.add_argument("--pg", help="PostgreSQL server URL (a throwaway schema is used)")
    args = p.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        results["SQLite"] = measure(f"sqlite:///{tmp}/parked.db", args.runs)
    if args.pg:
        from pg_step_overhead import throwaway_schema

        with throwaway_schema(args.pg) as url:
            results["PostgreSQL"] = measure(url, args.runs)
    print(f"{args.runs:,} runs parked on a timer, one worker with 4 slots, {os.cpu_count()} cores")
    for store, r in results.items():
        print(
            f"  {store}: threads {r['idle_threads']:.0f} idle, {r['some_threads']:.0f} with"
            f" {r['some']:.0f} parked, {r['parked_threads']:.0f} with all parked; RSS"
            f" {r['idle_rss']:.1f} / {r['some_rss']:.1f} / {r['parked_rss']:.1f} MiB;"
            f" parked in {r['park_s']:.1f} s; a new one-step run then took"
            f" {r['quick_ms']:.0f} ms"
        )


if __name__ == "__main__":
    main()
