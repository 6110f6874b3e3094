"""What the spend ledger costs a step: a step that reports usage against one that does not.

A step that calls ``durably.usage(...)`` commits one ledger row right after its call
returns, before its result (so a crash in between still counts the spend): one extra
commit. Both kinds run here, now, on the same journal (alternating rounds, median per
step), so the difference means something on any machine.

    python bench/usage_ledger.py [--pg postgresql://...] [--steps 500] [--repeat 3]

Without ``--pg`` the journal is a SQLite file (synchronous=FULL, the default) in a temp
directory; with it, a throwaway PostgreSQL schema dropped at the end.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import durably


@contextmanager
def journal(pg: str | None) -> Iterator[str]:
    """A URL of an empty journal: a SQLite file, or a throwaway PostgreSQL schema."""
    if pg is None:
        with tempfile.TemporaryDirectory() as tmp:
            yield f"sqlite:///{tmp}/journal.db"
        return
    import psycopg

    name = f"bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{name}"')
    sep = "&" if "?" in pg else "?"
    try:
        yield f"{pg}{sep}options=-csearch_path%3D{name}"
    finally:
        with psycopg.connect(pg, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{name}" CASCADE')


def per_step_ms(engine: durably.Engine, report: bool, steps: int) -> float:
    """Median wall time of one live step, in ms."""

    def model(i: int) -> int:
        if report:
            durably.usage(input_tokens=900, output_tokens=100, cost_usd=0.001)
        return i

    @engine.workflow(name=f"bench_{report}_{uuid.uuid4().hex[:6]}")
    def wf(ctx: durably.Context) -> list[float]:
        times = []
        for i in range(steps):
            t0 = time.perf_counter()
            ctx.step("model", model, i)
            times.append(time.perf_counter() - t0)
        return times

    return statistics.median(engine.run(wf)) * 1000


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pg", help="a PostgreSQL server URL (default: a SQLite file)")
    p.add_argument("--steps", type=int, default=500)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    plain: list[float] = []
    usage: list[float] = []
    with journal(args.pg) as url:
        engine = durably.Engine(url)
        try:
            for _ in range(args.repeat):
                plain.append(per_step_ms(engine, False, args.steps))
                usage.append(per_step_ms(engine, True, args.steps))
        finally:
            engine.close()
    a, b = statistics.median(plain), statistics.median(usage)
    print(f"step without usage: {a:.3f} ms (median of {args.repeat} x {args.steps})")
    print(f"step with usage:    {b:.3f} ms (+{b - a:.3f} ms: the ledger row's commit)")


if __name__ == "__main__":
    main()
