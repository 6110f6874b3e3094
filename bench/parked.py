"""Parked runs cost a row, not a thread: 1,000 runs waiting on a signal, and the wake-up.

For each store (a SQLite file; PostgreSQL with ``--pg URL``, in a throwaway schema) a
real ``durably worker`` process serves a workflow that waits for a signal and then
records ``time.time()`` in a step. Printed, from one run:

- the worker's thread count and RSS when idle after driving ``--runs`` short runs to
  their end (the baseline: its slots' threads started, its caches warm) and once
  ``--runs`` more runs are parked on the wait (their ratio: close to 1 when a parked run
  holds no thread, no slot and no per-run memory in the worker);
- the time from ``engine.signal`` (in this process) to the woken run's next live step
  (the time that step recorded), median of ``--samples`` signals, against the time from
  ``engine.start`` of a new run to its first live step in the same worker (the
  baseline: the same claim path, from a queued run instead of a parked one).

Run: ``python bench/parked.py [--runs 1000] [--samples 20] [--pg URL]``. Linux only
(reads /proc).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import durably  # noqa: E402

APP = textwrap.dedent(
    """
    import time
    import durably

    engine = durably.Engine()  # DURABLY_URL

    @engine.workflow(name="waiter")
    def waiter(ctx, i):
        ctx.wait_for_signal("go")
        return ctx.step("woke", time.time)

    @engine.workflow(name="starter")
    def starter(ctx, i):
        return ctx.step("started", time.time)
    """
)
CONCURRENCY = 8
POLL_S = 0.001  # how often this script looks for the woken step (not the worker's poll)


def proc_status(pid: int) -> tuple[int, int]:
    """The process's thread count and resident set size (KiB), from /proc."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return int(fields["Threads"]), int(fields["VmRSS"].split()[0])


def wait_for(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.05)


def step_time(engine: durably.Engine, run_id: str, position: str) -> float:
    """The time the run's step at ``position`` recorded (its output), waiting for it."""
    while True:
        recs = engine.store.load_history(run_id, 0)
        for r in recs:
            if r.position == position and r.status == "ok" and r.output is not None:
                return float(r.output)
        time.sleep(POLL_S)


def measure(url: str, label: str, runs: int, samples: int, tmp: Path) -> dict[str, Any]:
    app = tmp / f"parked_app_{label}.py"
    app.write_text(APP)
    env = {**os.environ, "DURABLY_URL": url}
    engine = durably.Engine(url)
    engine.workflow(name="waiter")(lambda ctx, i: None)  # registered to start runs
    engine.workflow(name="starter")(lambda ctx, i: None)
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "durably.cli",
            "worker",
            f"{app}:engine",
            "--concurrency",
            str(CONCURRENCY),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # The baseline: the worker idle after driving as many short runs to their end as
        # will park below (its slots' threads started on demand, its caches warm), so what
        # differs after the parking is what the parked runs themselves hold.
        for i in range(runs):
            engine.start("starter", i, run_id=f"warm{i}")
        wait_for(
            lambda: engine.store.count_runs(workflow="starter").get("completed", 0) == runs,
            600,
            f"{runs} completed runs",
        )
        time.sleep(0.5)
        idle = proc_status(worker.pid)
        t0 = time.perf_counter()
        for i in range(runs):
            engine.start("waiter", i, run_id=f"w{i}")
        wait_for(
            lambda: engine.store.count_runs(workflow="waiter").get("parked", 0) == runs,
            600,
            f"{runs} parked runs",
        )
        parked_s = time.perf_counter() - t0
        time.sleep(0.5)
        parked = proc_status(worker.pid)
        # engine.signal -> the woken run's next live step, one run at a time.
        wake = []
        for i in range(samples):
            run_id = f"w{i}"
            sent = time.time()
            engine.signal(run_id, "go")
            wake.append(step_time(engine, run_id, "1") - sent)
        # Baseline: engine.start -> the new run's first live step, same worker.
        start = []
        for i in range(samples):
            run_id = f"s{i}"
            sent = time.time()
            engine.start("starter", i, run_id=run_id)
            start.append(step_time(engine, run_id, "0") - sent)
    finally:
        worker.terminate()
        worker.wait(30)
        engine.close()
    return {
        "label": label,
        "idle": idle,
        "parked": parked,
        "parked_s": parked_s,
        "wake_ms": statistics.median(wake) * 1e3,
        "start_ms": statistics.median(start) * 1e3,
    }


def report(r: dict[str, Any], runs: int, samples: int) -> None:
    (t_idle, rss_idle), (t_parked, rss_parked) = r["idle"], r["parked"]
    print(
        f"{r['label']}: worker ({CONCURRENCY} slots) idle after {runs:,} finished runs"
        f" {t_idle} threads, {rss_idle / 1024:.1f} MiB RSS; with {runs:,} runs parked on a"
        f" signal {t_parked} threads,"
        f" {rss_parked / 1024:.1f} MiB RSS (ratio {rss_parked / rss_idle:.2f}); {runs:,}"
        f" runs parked in {r['parked_s']:.1f} s"
    )
    print(
        f"{r['label']}: engine.signal -> next live step, median of {samples}:"
        f" {r['wake_ms']:.1f} ms; engine.start -> first live step (baseline):"
        f" {r['start_ms']:.1f} ms; ratio {r['wake_ms'] / r['start_ms']:.2f}"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=1000)
    p.add_argument("--samples", type=int, default=20)
    p.add_argument("--pg", help="PostgreSQL server URL (a throwaway schema is used)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        r = measure(f"sqlite:///{tmp}/parked.db", "SQLite", args.runs, args.samples, Path(tmp))
        report(r, args.runs, args.samples)
        if args.pg:
            from pg_step_overhead import throwaway_schema

            with throwaway_schema(args.pg) as url:
                r = measure(url, "PostgreSQL", args.runs, args.samples, Path(tmp))
            report(r, args.runs, args.samples)


if __name__ == "__main__":
    main()
