"""durably and DBOS side by side, each against the raw fsync'd commit measured beside them.

Per step in power mode (one workflow of trivial steps) and at 100 concurrent runs in one
process (one thread each), on SQLite and, with ``--pg``, on PostgreSQL: each round
(interleaved) measures the raw commit, durably and DBOS on the same disk or server, and the
medians and ratios are printed. DBOS runs in its own venv (never one of durably's
dependencies), as a child process: ``bench/dbos_side.py``.

    make bench-dbos                     # creates .venv-dbos on first use
    python bench/dbos_compare.py [--rounds 3] [--lone-steps 200] [--runs 100] [--steps 10]
        [--pg postgresql://postgres@127.0.0.1:5432/test] [--dbos-python .venv-dbos/bin/python]

Without the DBOS venv it prints how to create it and exits 0 (skipped, nothing measured).

The raw commit is durably's: WAL at ``synchronous=FULL`` on SQLite, ``synchronous_commit``
on for PostgreSQL. DBOS keeps SQLite in its rollback journal (``journal_mode=DELETE``, it
sets no ``synchronous``, so FULL); a raw commit in that mode is printed too, for context.
On PostgreSQL DBOS writes to a database of its own (created by DBOS, dropped at the end).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
DBOS_VERSION = "3.4.0"  # the version measured in docs/benchmarks.md
DEFAULT_DBOS_PYTHON = HERE.parent / ".venv-dbos" / "bin" / "python"


def dbos_side(python: Path, url: str, args: argparse.Namespace) -> dict[str, float]:
    """DBOS's figures from a child process of its own venv."""
    out = subprocess.run(
        [
            str(python),
            str(HERE / "dbos_side.py"),
            url,
            "--lone-steps",
            str(args.lone_steps),
            "--runs",
            str(args.runs),
            "--steps",
            str(args.steps),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    got: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return got


@contextlib.contextmanager
def dbos_database(server_url: str) -> Iterator[str]:
    """The URL of a database for DBOS on the server of ``server_url``; dropped on exit."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    name = f"durably_dbos_bench_{uuid.uuid4().hex[:8]}"
    info = conninfo_to_dict(server_url)
    user = info.get("user", "postgres")
    host = info.get("host", "127.0.0.1")
    port = info.get("port", "5432")
    auth = f"{user}:{info['password']}" if info.get("password") else user
    try:
        yield f"postgresql://{auth}@{host}:{port}/{name}"
    finally:
        with psycopg.connect(make_conninfo(server_url), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def one_round(
    backend: str, tmp: Path, pg: str | None, python: Path, args: argparse.Namespace
) -> dict[str, float]:
    """Raw commit, durably and DBOS, on one backend, once."""
    from concurrent_runs import concurrent_steps_per_s
    from durability_modes import durably_s, raw_pg_s, raw_sqlite_s
    from pg_step_overhead import throwaway_schema

    tag = uuid.uuid4().hex[:6]
    out: dict[str, float] = {}
    with contextlib.ExitStack() as stack:
        if backend == "sqlite":
            out["raw"] = raw_sqlite_s(tmp / f"raw-{tag}.db", "FULL", 500)
            # DBOS's own settings: the rollback journal, synchronous FULL.
            out["raw_dbos_mode"] = raw_sqlite_s(
                tmp / f"raw-delete-{tag}.db", "FULL", 500, journal_mode="DELETE"
            )
            durably_url = f"sqlite:///{tmp / f'durably-{tag}.db'}"
            durably_many = f"sqlite:///{tmp / f'durably-many-{tag}.db'}"
            dbos_url = f"sqlite:///{tmp / f'dbos-{tag}.sqlite'}"
        else:
            assert pg is not None
            out["raw"] = raw_pg_s(pg, "on", 500)
            durably_url = durably_many = stack.enter_context(throwaway_schema(pg))
            dbos_url = stack.enter_context(dbos_database(pg))
        out["durably_lone"] = durably_s(durably_url, "power", args.lone_steps, effect=False)
        out["durably_concurrent"] = concurrent_steps_per_s(
            durably_many, args.runs, args.steps, "power"
        )[0]
        dbos = dbos_side(python, dbos_url, args)
    out["dbos_lone"] = dbos["lone"]
    out["dbos_concurrent"] = dbos["concurrent"]
    return out


def report(backend: str, rounds: list[dict[str, float]], args: argparse.Namespace) -> None:
    """Print one backend's medians and ratios."""

    def m(key: str) -> float:
        return statistics.median(r[key] for r in rounds)

    def ratio(a: str, b: str) -> float:
        return statistics.median(r[a] / r[b] for r in rounds)

    raw_rate = statistics.median(1 / r["raw"] for r in rounds)
    print(f"{backend}: medians of {len(rounds)} interleaved rounds")
    print(f"  raw fsync'd commit                          {m('raw') * 1e3:8.3f} ms")
    if "raw_dbos_mode" in rounds[0]:
        print(f"  raw commit in DBOS's mode (rollback journal) {m('raw_dbos_mode') * 1e3:7.3f} ms")
    print(f"  per step, {args.lone_steps} steps, power mode:")
    print(
        f"    durably {m('durably_lone') * 1e3:8.3f} ms  = {ratio('durably_lone', 'raw'):6.2f}x"
        " raw (target <= 1.25x SQLite, <= 1.5x PostgreSQL)"
    )
    print(f"    DBOS    {m('dbos_lone') * 1e3:8.3f} ms  = {ratio('dbos_lone', 'raw'):6.2f}x raw")
    print(
        f"    DBOS / durably per step                   {ratio('dbos_lone', 'durably_lone'):6.2f}x"
    )
    print(
        f"  {args.runs} concurrent runs x {args.steps} steps (raw single-commit rate"
        f" {raw_rate:.0f}/s):"
    )
    for who in ("durably", "dbos"):
        rate = m(f"{who}_concurrent")
        per = statistics.median(r[f"{who}_concurrent"] * r["raw"] for r in rounds)
        name = "durably" if who == "durably" else "DBOS   "
        print(f"    {name} {rate:8.0f} steps/s = {per:6.2f}x the raw rate")
    print(
        "    durably / DBOS steps/s                    "
        f"{ratio('durably_concurrent', 'dbos_concurrent'):6.2f}x (goal >= 20x)"
    )


def main() -> None:
    """Measure both on each backend and print the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lone-steps", type=int, default=200)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--steps", type=int, default=10, help="steps of each concurrent run")
    parser.add_argument("--pg", default=None, help="a PostgreSQL server URL (also measured)")
    parser.add_argument("--dir", type=Path, default=None, help="where the SQLite files go")
    parser.add_argument("--dbos-python", type=Path, default=DEFAULT_DBOS_PYTHON)
    args = parser.parse_args()
    if min(args.rounds, args.lone_steps, args.runs, args.steps) < 1:
        parser.error("--rounds, --lone-steps, --runs and --steps must be >= 1")
    python = args.dbos_python
    if not python.exists():
        print(
            f"skipped: no DBOS venv ({python} is missing). Create it with `make bench-dbos`"
            " (which then runs this) or: python3 -m venv .venv-dbos &&"
            f" .venv-dbos/bin/pip install dbos=={DBOS_VERSION}"
            " (DBOS is never installed into durably's own venv)"
        )
        return
    sys.path.insert(0, str(HERE))
    backends = ["sqlite"] + (["postgresql"] if args.pg else [])
    got: dict[str, list[dict[str, float]]] = {b: [] for b in backends}
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        for r in range(args.rounds):
            for backend in backends if r % 2 == 0 else reversed(backends):
                got[backend].append(one_round(backend, Path(d), args.pg, python, args))
    version = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('dbos'))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    print(
        f"durably vs DBOS {version}, {os.cpu_count()} cores, load average"
        f" {os.getloadavg()[0]:.1f} at the end (other programs share the machine)"
    )
    for backend in backends:
        report(backend, got[backend], args)


if __name__ == "__main__":
    main()
