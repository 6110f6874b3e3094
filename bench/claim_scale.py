"""Claim cost against journal size: a claim must not read finished runs.

Prints, from one run on the same disk, the mean time of ``claim_next`` taking each of 200
queued runs from a journal holding no finished runs and from one holding 100,000
(inserted in bulk with SQL), and their ratio (target: close to 1; a claim that scanned
the finished runs would be tens of times slower). With ``--pg URL`` the same on
PostgreSQL (a throwaway schema).

Run: ``python bench/claim_scale.py [--finished N] [--runs N] [--pg URL]``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from durably.clock import FakeClock  # noqa: E402
from durably.store.base import NewRun, Owner  # noqa: E402
from durably.store.open import open_store  # noqa: E402

ME = Owner("bench", 1, "1", "m:b:1")
BULK = """
INSERT INTO runs (run_id, workflow, queue, input, input_digest, codec_version, status,
                  created_at, updated_at, finished_at)
SELECT 'done-' || x, 'wf', 'default', '{{}}', 'd', 1, 'completed', x, x, x FROM {series}
"""


def mean_claim_s(url: str, finished: int, runs: int, bulk: Any) -> float:
    """Mean seconds per claim of ``runs`` queued runs behind ``finished`` finished ones."""
    store = open_store(url, FakeClock(2e9))
    try:
        if finished:
            bulk(finished)
        for i in range(runs):
            store.create_run(NewRun(f"q{i:05}", "wf", None, None, "default", "{}", "d", 1))
        t0 = time.perf_counter()
        for _ in range(runs):
            assert store.claim_next(ME, 30, 10, lambda _: False, {"wf": None}, ["default"])
        return (time.perf_counter() - t0) / runs
    finally:
        store.close()


def sqlite_bulk(path: Path) -> Any:
    def bulk(n: int) -> None:
        import sqlite3

        conn = sqlite3.connect(path)
        series = (
            f"(WITH RECURSIVE s(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM s WHERE x < {n})"
            " SELECT x FROM s)"
        )
        conn.execute(BULK.format(series=series))
        conn.commit()
        conn.execute("ANALYZE")
        conn.close()

    return bulk


def pg_bulk(url: str) -> Any:
    def bulk(n: int) -> None:
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(BULK.format(series=f"generate_series(1, {n}) AS s (x)").encode())
            conn.execute("ANALYZE runs")

    return bulk


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--finished", type=int, default=100_000)
    p.add_argument("--runs", type=int, default=200)
    p.add_argument("--pg", help="PostgreSQL server URL (a throwaway schema is used)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        small = mean_claim_s(f"sqlite:///{tmp}/a.db", 0, args.runs, None)
        big = mean_claim_s(
            f"sqlite:///{tmp}/b.db", args.finished, args.runs, sqlite_bulk(Path(tmp) / "b.db")
        )
    print(
        f"SQLite: {small * 1e3:.2f} ms/claim empty, {big * 1e3:.2f} ms/claim behind"
        f" {args.finished:,} finished runs; ratio {big / small:.2f}"
    )
    if args.pg:
        from pg_step_overhead import throwaway_schema

        with throwaway_schema(args.pg) as url:
            small = mean_claim_s(url, 0, args.runs, None)
        with throwaway_schema(args.pg) as url:
            big = mean_claim_s(url, args.finished, args.runs, pg_bulk(url))
        print(
            f"PostgreSQL: {small * 1e3:.2f} ms/claim empty, {big * 1e3:.2f} ms/claim"
            f" behind {args.finished:,} finished runs; ratio {big / small:.2f}"
        )


if __name__ == "__main__":
    main()
