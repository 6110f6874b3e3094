"""Where a live step's cost goes, counted rather than timed (issue 28): SQL statements,
event rows and Python function calls per step, and CPU per step beside a raw commit.

One SQLite journal on a file system of your choice (``--dir``; /dev/shm keeps the disk
out of it), ``durability="process"`` (no fsync: what is left is CPU), a workflow of N
trivial steps:

- statements per step: every statement the store's connection runs, traced with
  ``sqlite3.Connection.set_trace_callback``, by its first word;
- event rows per step: the run's events over its steps;
- Python calls per step: cProfile's count of function calls (Python and C) for the run;
- CPU per step (process time, the minimum of ``--rounds`` runs) beside a raw sqlite3
  INSERT+COMMIT at ``synchronous=OFF`` and at ``NORMAL``, measured in the same run.

    python bench/step_cost.py [--steps 1000] [--rounds 5] [--dir /dev/shm]
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import pstats
import sqlite3
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import durably
from durability_modes import raw_sqlite_s


def trivial(i: int) -> dict[str, int]:
    """The benchmark's step: does nothing but return a small dict."""
    return {"i": i}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    n = args.steps
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        engine = durably.Engine(f"sqlite:///{Path(tmp) / 'j.db'}", durability="process")

        @engine.workflow(name="bench")
        def many(ctx: durably.Context, steps: int) -> int:
            for i in range(steps):
                ctx.step("s", trivial, i)
            return steps

        engine.run(many, 20, run_id="warm-up")
        # Statements: traced on the store's own connection, for one run of n steps.
        seen: collections.Counter[str] = collections.Counter()
        conn = engine.store._conn  # type: ignore[attr-defined]
        conn.set_trace_callback(lambda text: seen.update([text.split(None, 1)[0].upper()]))
        run_id = f"count-{uuid.uuid4().hex[:6]}"
        engine.run(many, n, run_id=run_id)
        conn.set_trace_callback(None)
        with sqlite3.connect(Path(tmp) / "j.db") as read:
            (events,) = read.execute(
                "SELECT count(*) FROM events WHERE run_id = ? AND kind LIKE 'step.%'", (run_id,)
            ).fetchone()
        profile = cProfile.Profile()
        profile.enable()
        engine.run(many, n, run_id=f"calls-{uuid.uuid4().hex[:6]}")
        profile.disable()
        calls = sum(v[1] for v in pstats.Stats(profile).stats.values())  # type: ignore[attr-defined]
        cpu, raw_off, raw_normal = [], [], []
        for r in range(args.rounds):
            raw_off.append(raw_sqlite_s(Path(tmp) / f"off-{r}.db", "OFF", n, time.process_time))
            raw_normal.append(
                raw_sqlite_s(Path(tmp) / f"normal-{r}.db", "NORMAL", n, time.process_time)
            )
            t0 = time.process_time()
            engine.run(many, n, run_id=f"cpu-{r}-{uuid.uuid4().hex[:6]}")
            cpu.append((time.process_time() - t0) / n)
        engine.close()
    total = sum(seen.values())
    print(f"{n} trivial steps, durability=process, one run each (CPU: min of {args.rounds})")
    print(f"  statements per step                 {total / n:8.2f}")
    for word, count in seen.most_common():
        print(f"    {word:32s}  {count / n:8.2f}")
    print(f"  step event rows per step            {events / n:8.2f}")
    print(f"  Python calls per step (cProfile)    {calls / n:8.1f}")
    print(f"  CPU per step, durably               {min(cpu) * 1e6:8.1f} us")
    print(f"  CPU per commit, raw OFF             {min(raw_off) * 1e6:8.1f} us")
    print(f"  CPU per commit, raw NORMAL          {min(raw_normal) * 1e6:8.1f} us")
    print(f"  durably / raw OFF                   {min(cpu) / min(raw_off):8.2f}x")


if __name__ == "__main__":
    main()
