"""``durably replay --check`` throughput: runs checked per second over recorded runs.

Records one 20-step run live, copies its journal rows to N runs (default 10,000) in the
same SQLite file, then measures, in one process and on the same file:
- ``replay --check`` over every run (replaying 20 steps each against the code, executing
  nothing, writing nothing): runs/s and microseconds per replayed step;
- the baseline: loading the same histories alone (``store.load_history`` per run), so the
  ratio says what the replay adds to reading the journal.
Median of 3 interleaved rounds.

Run: ``python bench/replay_check.py [--runs N] [--steps S] [--dir PATH]``.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

import durably
from durably.replaycheck import check_runs, runs_to_check


def build(path: Path, runs: int, steps: int) -> durably.Engine:
    """An engine over a journal of ``runs`` completed runs of ``steps`` steps each."""
    url = f"sqlite:///{path}"
    engine = durably.Engine(url, synchronous="NORMAL")

    @engine.workflow(name="agent")
    def agent(ctx: durably.Context, n: int) -> int:
        total = 0
        for i in range(n):
            total += ctx.step(f"tool{i % 5}", lambda a, b: a + b, i, total)
        return total

    engine.run(agent, steps, run_id="template")
    conn = sqlite3.connect(path)
    for table in ("runs", "steps"):
        cols = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
        chosen = ", ".join("'copy-' || n.x" if c == "run_id" else c for c in cols)
        conn.execute(
            f"WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < {runs - 1})"
            f" INSERT INTO {table} ({', '.join(cols)})"
            f" SELECT {chosen} FROM {table}, n WHERE {table}.run_id = 'template'"
        )
    conn.commit()
    conn.close()
    return engine


def time_check(engine: durably.Engine, limit: int) -> tuple[float, int]:
    t0 = time.perf_counter()
    report = check_runs(engine, runs_to_check(engine, None, None, None, limit, finished=True))
    elapsed = time.perf_counter() - t0
    assert not report.findings, report.findings[:3]
    return elapsed, report.checked


def time_load(engine: durably.Engine, limit: int) -> float:
    t0 = time.perf_counter()
    for run in engine.store.list_runs(limit=limit):
        engine.store.load_history(run.run_id, run.generation)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--dir", type=Path, default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        engine = build(Path(d) / "journal.db", args.runs, args.steps)
        checks, loads = [], []
        for _ in range(3):
            elapsed, checked = time_check(engine, args.runs + 1)
            checks.append(elapsed)
            loads.append(time_load(engine, args.runs + 1))
        engine.close()
    check_s, load_s = statistics.median(checks), statistics.median(loads)
    print(f"runs checked: {checked:,} of {args.steps} steps each")
    print(f"replay --check: {check_s:.2f} s = {checked / check_s:,.0f} runs/s"
          f" ({check_s / (checked * args.steps) * 1e6:.1f} us per replayed step)")  # fmt: skip
    print(f"loading the histories alone: {load_s:.2f} s = {checked / load_s:,.0f} runs/s")
    print(f"ratio check / load: {check_s / load_s:.2f}x")


if __name__ == "__main__":
    main()
