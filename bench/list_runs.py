"""``engine.list_runs`` page cost against how deep the page is, and against an OFFSET pager.

Fills a journal with N runs in bulk (SQL), then prints, from one run on the same disk, the
mean time of one 50-run page read through ``engine.list_runs``:

- at the newest end (the first page) and at the oldest end (a cursor past N - 100 runs),
  and their ratio (target: close to 1: a keyset page is an index range from the cursor,
  whatever came before it);
- the same deep page read the OFFSET way (``ORDER BY ... LIMIT 50 OFFSET N - 100``, the
  baseline durably does not use), as a ratio to the keyset page;
- the first page when every run shares one ``created_at`` (a bulk import on a frozen
  clock), as a ratio to the first page of distinct times: the index orders by time only,
  so runs of one instant are sorted per page (what an index on ``(created_at, run_id)``
  would save; the schema has none, see docs/api.md "Listing runs").

With ``--pg URL`` the same on PostgreSQL (a throwaway schema).

Run: ``python bench/list_runs.py [--runs N] [--pg URL]``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import durably
from durably.runlist import encode_cursor

PAGE = 50
REPEAT = 20
COLUMNS = (
    "run_id, workflow, queue, input, input_digest, codec_version, status, outcome,"
    " created_at, updated_at"
)


def rows(n: int, ties: bool) -> list[tuple[Any, ...]]:
    t0 = 1_700_000_000.0
    return [
        (f"run-{i:07d}", "wf", "default", "[]", "d", 1, "completed", '"ok"')
        + ((t0, t0) if ties else (t0 + i, t0 + i))
        for i in range(n)
    ]


def mean_s(fn: Callable[[], object]) -> float:
    fn()  # warm the cache: every variant is measured warm
    t = time.perf_counter()
    for _ in range(REPEAT):
        fn()
    return (time.perf_counter() - t) / REPEAT


def measure(
    engine: durably.Engine, offset_page: Callable[[int], object], n: int, ties: bool
) -> dict[str, float]:
    # The cursor of the run n - 100 places from the newest end (newest first, then by
    # run id: with distinct times that is run 100, with one instant run n - 100).
    deep_run = engine.get_run(f"run-{n - 100 if ties else 100:07d}")
    after = encode_cursor(deep_run)
    assert engine.list_runs(limit=PAGE, after=after).runs, "the deep page is not empty"
    return {
        "first": mean_s(lambda: engine.list_runs(limit=PAGE)),
        "deep": mean_s(lambda: engine.list_runs(limit=PAGE, after=after)),
        "offset": mean_s(lambda: offset_page(n - 100)),
    }


def sqlite_case(n: int, ties: bool) -> dict[str, float]:
    import sqlite3

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "journal.db"
        engine = durably.Engine(f"sqlite:///{path}")
        conn = sqlite3.connect(path)
        with conn:
            conn.executemany(
                f"INSERT INTO runs ({COLUMNS}) VALUES ({', '.join('?' * 10)})", rows(n, ties)
            )

        def offset_page(skip: int) -> object:
            return conn.execute(
                "SELECT * FROM runs ORDER BY created_at DESC, run_id LIMIT ? OFFSET ?",
                (PAGE, skip),
            ).fetchall()

        try:
            return measure(engine, offset_page, n, ties)
        finally:
            engine.close()
            conn.close()


def pg_case(server: str, n: int, ties: bool) -> dict[str, float]:
    import psycopg

    schema = f"bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(server, autocommit=True) as c:
        c.execute(f'CREATE SCHEMA "{schema}"')
    sep = "&" if "?" in server else "?"
    url = f"{server}{sep}options=-csearch_path%3D{schema}"
    try:
        engine = durably.Engine(url)
        conn = psycopg.connect(url, autocommit=True)
        with conn.cursor() as cur, cur.copy(f"COPY runs ({COLUMNS}) FROM STDIN") as copy:
            for row in rows(n, ties):
                copy.write_row(row)
        conn.execute("ANALYZE runs")

        def offset_page(skip: int) -> object:
            return conn.execute(
                "SELECT * FROM runs ORDER BY created_at DESC, run_id LIMIT %s OFFSET %s",
                (PAGE, skip),
            ).fetchall()

        try:
            return measure(engine, offset_page, n, ties)
        finally:
            engine.close()
            conn.close()
    finally:
        with psycopg.connect(server, autocommit=True) as c:
            c.execute(f'DROP SCHEMA "{schema}" CASCADE')


def report(name: str, case: Callable[[bool], dict[str, float]]) -> None:
    distinct = case(False)
    tied = case(True)
    ms = {k: v * 1000 for k, v in distinct.items()}
    print(
        f"{name}: first page {ms['first']:.2f} ms, deep page {ms['deep']:.2f} ms"
        f" (deep/first {distinct['deep'] / distinct['first']:.2f}x);"
        f" OFFSET deep page {ms['offset']:.2f} ms"
        f" (offset/keyset {distinct['offset'] / distinct['deep']:.1f}x);"
        f" first page with every run at one instant {tied['first'] * 1000:.2f} ms"
        f" (ties/distinct {tied['first'] / distinct['first']:.0f}x)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--pg", help="a PostgreSQL server URL (a throwaway schema is used)")
    args = parser.parse_args()
    print(f"{args.runs:,} runs, pages of {PAGE}, mean of {REPEAT} reads each")
    report("sqlite", lambda ties: sqlite_case(args.runs, ties))
    if args.pg:
        report("postgres", lambda ties: pg_case(args.pg, args.runs, ties))


if __name__ == "__main__":
    main()
