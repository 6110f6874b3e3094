"""Per-step cost of each durability mode against raw commits measured beside it, in one run.

For each round (interleaved, so load on a shared machine hits every figure alike) it
measures a workflow of N trivial steps and one of N effect steps under
``durability="power"``, ``"process"`` and ``"effects"``, and raw sqlite3 INSERT+COMMIT
loops at ``synchronous=FULL`` (power's floor), ``NORMAL`` and ``OFF`` (process's floor).
It prints the medians and the issue's ratios:

- power: live step / raw FULL commit (target <= 1.25);
- process: live step / raw OFF commit (target <= 2);
- effects: pure step / process-mode step (target ~1: pure steps at process-mode cost).

With ``--pg URL`` it does the same on PostgreSQL (raw: one INSERT + COMMIT per row with
``synchronous_commit`` on, then off), in a throwaway schema.

    python bench/durability_modes.py [--steps 500] [--rounds 5] [--pg postgresql://...]
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import durably

MODES = ("power", "process", "effects")


def trivial(i: int) -> dict[str, int]:
    """The pure step: does nothing but return a small dict."""
    return {"i": i}


@durably.step(effect=True)
def trivial_effect(i: int, *, idempotency_key: str) -> dict[str, int]:
    """The effect step: an intent is recorded (and, but in process mode, fsync'd) first."""
    return {"i": i}


def raw_sqlite_s(
    path: Path, synchronous: str, n: int, clock: Callable[[], float] = time.perf_counter
) -> float:
    """Mean seconds of one INSERT+COMMIT in WAL at ``synchronous`` (on ``clock``: wall
    time, or ``time.process_time`` for its CPU)."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute(
        "CREATE TABLE t (run_id TEXT, seq INTEGER, output TEXT, PRIMARY KEY (run_id, seq))"
    )
    t0 = clock()
    for i in range(n):
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO t VALUES (?, ?, ?)", ("r", i, '{"i":1}'))
        conn.execute("COMMIT")
    elapsed = clock() - t0
    conn.close()
    return elapsed / n


def raw_pg_s(url: str, synchronous_commit: str, n: int) -> float:
    """Mean seconds of one INSERT + COMMIT on PostgreSQL at ``synchronous_commit``."""
    import psycopg

    table = f"raw_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"SET synchronous_commit = {synchronous_commit}")
        conn.execute(
            f"CREATE TABLE {table} (run_id TEXT, seq INT, output TEXT, PRIMARY KEY (run_id, seq))"
        )
        t0 = time.perf_counter()
        for i in range(n):
            with conn.transaction():
                conn.execute(f"INSERT INTO {table} VALUES (%s, %s, %s)", ("r", i, '{"i":1}'))
        elapsed = time.perf_counter() - t0
        conn.execute(f"DROP TABLE {table}")
    return elapsed / n


def durably_s(url: str, mode: str, n: int, effect: bool) -> float:
    """Mean seconds per live step of an n-step workflow under ``mode``."""
    engine = durably.Engine(url, durability=mode)

    @engine.workflow(name="bench")
    def many(ctx: durably.Context, steps: int) -> int:
        for i in range(steps):
            if effect:
                ctx.step("e", trivial_effect, i)
            else:
                ctx.step("s", trivial, i)
        return steps

    run_id = f"{mode}-{'e' if effect else 's'}-{uuid.uuid4().hex[:6]}"
    t0 = time.perf_counter()
    engine.run(many, n, run_id=run_id)
    elapsed = (time.perf_counter() - t0) / n
    engine.close()
    return elapsed


def one_round(base: Path, n: int, pg: str | None) -> dict[str, float]:
    tag = uuid.uuid4().hex[:6]
    out = {
        f"raw sqlite {s}": raw_sqlite_s(base / f"raw-{s}-{tag}.db", s, n)
        for s in ("FULL", "NORMAL", "OFF")
    }
    for mode in MODES:
        url = f"sqlite:///{base / f'{mode}-{tag}.db'}"
        out[f"sqlite {mode} pure"] = durably_s(url, mode, n, effect=False)
        out[f"sqlite {mode} effect"] = durably_s(url, mode, n // 4, effect=True)
    if pg:
        out["raw pg on"] = raw_pg_s(pg, "on", n)
        out["raw pg off"] = raw_pg_s(pg, "off", n)
        for mode in MODES:
            out[f"pg {mode} pure"] = durably_s(pg, mode, n, effect=False)
            out[f"pg {mode} effect"] = durably_s(pg, mode, n // 4, effect=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--pg", default=None, help="a PostgreSQL URL (a schema is made)")
    args = parser.parse_args()
    pg_url, drop = args.pg, None
    if pg_url:
        import psycopg

        schema = f"bench_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
        drop = schema
        sep = "&" if "?" in pg_url else "?"
        pg_url = f"{pg_url}{sep}options=-csearch_path%3D{schema}"
    figures: dict[str, list[float]] = defaultdict(list)
    try:
        with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
            for _ in range(args.rounds):
                for name, value in one_round(Path(tmp), args.steps, pg_url).items():
                    figures[name].append(value)
    finally:
        if drop:
            import psycopg

            with psycopg.connect(args.pg, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA "{drop}" CASCADE')
    med = {name: statistics.median(v) for name, v in figures.items()}
    print(f"medians of {args.rounds} interleaved rounds, {args.steps} steps (effects: a quarter)")
    for name, value in med.items():
        print(f"  {name:24s} {value * 1e3:8.3f} ms")
    ratios = [
        ("sqlite power pure / raw FULL (<= 1.25)", "sqlite power pure", "raw sqlite FULL"),
        ("sqlite process pure / raw OFF (<= 2)", "sqlite process pure", "raw sqlite OFF"),
        ("sqlite process pure / raw NORMAL", "sqlite process pure", "raw sqlite NORMAL"),
        ("sqlite effects pure / process pure (~1)", "sqlite effects pure", "sqlite process pure"),
        ("sqlite effects effect / power effect", "sqlite effects effect", "sqlite power effect"),
        ("pg power pure / raw on (<= 1.5)", "pg power pure", "raw pg on"),
        ("pg process pure / raw off (<= 2)", "pg process pure", "raw pg off"),
        ("pg effects pure / process pure (~1)", "pg effects pure", "pg process pure"),
    ]
    for label, top, bottom in ratios:
        if top in med and bottom in med:
            print(f"  {label:44s} {med[top] / med[bottom]:6.2f}x")


if __name__ == "__main__":
    main()
