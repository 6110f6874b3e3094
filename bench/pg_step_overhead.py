"""Per-step cost of durably on PostgreSQL against a raw INSERT + COMMIT, in one run.

A workflow of N trivial steps runs through ``durably.Engine(url)``; the baseline is the
cheapest durable write a hand-rolled journal could make on the same server: one INSERT and
one COMMIT per row from psycopg (autocommit off). Both are measured here, now, on the same
server, so the ratio means something on any machine; absolute figures do not travel.
The resume time is that of a run whose N recorded steps replay from the journal (its last
step crashed the first time, so the run is unfinished and really replays).

    python bench/pg_step_overhead.py [--db postgresql://...] [--steps 1000] [--repeat 3]

Everything happens in a throwaway schema that is dropped at the end. Target: ratio <= 1.5
(DBOS 3.4.0 was measured at 3.7 ms/step against 0.46 ms raw).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import psycopg

import durably

PG_URL_DEFAULT = "postgresql://postgres@127.0.0.1:5432/test"
PAYLOAD = '"ok"'


@contextmanager
def throwaway_schema(server_url: str) -> Iterator[str]:
    """A URL whose connections work in a fresh schema, dropped on exit."""
    name = f"bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{name}"')
    sep = "&" if "?" in server_url else "?"
    try:
        yield f"{server_url}{sep}options=-csearch_path%3D{name}"
    finally:
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{name}" CASCADE')


def trivial(i: int) -> str:
    """The step: no work at all, so what is measured is durably's own cost."""
    return "ok"


class DurablyBench:
    """A workflow of ``steps`` trivial steps whose last step crashes the first time."""

    def __init__(self, url: str, steps: int) -> None:
        self.steps = steps
        self.engine = durably.Engine(url)
        self.crash_armed = False

        def last(n: int) -> str:
            if self.crash_armed:
                self.crash_armed = False
                raise KeyboardInterrupt  # a crash: not an Exception, so nothing is recorded
            return "done"

        @self.engine.workflow(name="bench")
        def flow(ctx: durably.Context, n: int) -> int:
            for i in range(n):
                ctx.step("trivial", trivial, i)
            ctx.step("last", last, n)
            return n

        self.flow = flow
        self.engine.run(flow, 50, run_id="warm-up")  # pool, prepared statements, caches

    def once(self, run_id: str) -> tuple[float, float]:
        """Seconds per live step, and seconds to resume the recorded history."""
        self.crash_armed = True
        t0 = time.perf_counter()
        try:
            self.engine.run(self.flow, self.steps, run_id=run_id)
        except KeyboardInterrupt:
            pass
        per_step = (time.perf_counter() - t0) / self.steps
        t0 = time.perf_counter()
        assert self.engine.run(self.flow, self.steps, run_id=run_id) == self.steps
        return per_step, time.perf_counter() - t0

    def close(self) -> None:
        """Release the engine's connections."""
        self.engine.close()


class RawBench:
    """INSERT + COMMIT, one row per transaction, on one psycopg connection."""

    def __init__(self, url: str, steps: int) -> None:
        self.steps = steps
        self.conn = psycopg.connect(url)  # autocommit off: every commit is explicit
        self.conn.execute(
            "CREATE TABLE raw_journal (run_id TEXT, position INTEGER,"
            " output TEXT, at DOUBLE PRECISION, PRIMARY KEY (run_id, position))"
        )
        self.conn.commit()
        self._write("warm-up", 50)

    def _write(self, run_id: str, n: int) -> None:
        for i in range(n):
            self.conn.execute(
                "INSERT INTO raw_journal VALUES (%s, %s, %s, %s)", (run_id, i, PAYLOAD, time.time())
            )
            self.conn.commit()

    def once(self, run_id: str) -> float:
        """Seconds per row."""
        return _timed(lambda: self._write(run_id, self.steps)) / self.steps

    def close(self) -> None:
        """Close the connection."""
        self.conn.close()


def _timed(fn: Callable[[], None]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    """Run both measurements and print the figures and the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--db",
        default=os.environ.get("DURABLY_TEST_PG_URL", PG_URL_DEFAULT),
        help="PostgreSQL server URL (default: DURABLY_TEST_PG_URL)",
    )
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    raw_times: list[float] = []
    step_times: list[float] = []
    resumes: list[float] = []
    with throwaway_schema(args.db) as url:
        raw, dur = RawBench(url, args.steps), DurablyBench(url, args.steps)
        try:
            # Interleaved, so drift in the disk's fsync latency hits both sides alike.
            for r in range(args.repeat):
                raw_times.append(raw.once(f"raw-{r}"))
                step_s, resume_s = dur.once(f"bench-{r}")
                step_times.append(step_s)
                resumes.append(resume_s)
        finally:
            raw.close()
            dur.close()
    raw_s = statistics.median(raw_times)
    step = statistics.median(step_times)
    resume = statistics.median(resumes)
    print(f"PostgreSQL step overhead, {args.steps} trivial steps, median of {args.repeat}")
    print(f"  raw INSERT+COMMIT   {raw_s * 1e3:8.3f} ms/row")
    print(f"  durably step        {step * 1e3:8.3f} ms/step")
    print(f"  ratio               {step / raw_s:8.2f}x   (target <= 1.5x)")
    spread = ", ".join(f"{d / r:.2f}" for d, r in zip(step_times, raw_times, strict=True))
    print(f"  ratio per repetition  {spread}")
    print(
        f"  resume of {args.steps} steps {resume * 1e3:8.1f} ms"
        f"   ({resume / args.steps * 1e6:.1f} us/step replayed)"
    )


if __name__ == "__main__":
    main()
