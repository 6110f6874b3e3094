"""DBOS's half of ``bench/dbos_compare.py``: run by the Python of DBOS's own venv.

It imports DBOS only (durably is not installed there, and DBOS is never one of durably's
dependencies), runs the same workloads as durably's half and prints one JSON line:

- ``lone``: seconds per step of one workflow of ``--lone-steps`` trivial steps;
- ``concurrent``: steps per second of ``--runs`` workflows of ``--steps`` steps each,
  one thread each, started together (as durably's half does).

    .venv-dbos/bin/python bench/dbos_side.py URL [--lone-steps N] [--runs R] [--steps S]

URL is DBOS's system database: ``sqlite:///PATH`` or ``postgresql://...``.
"""

from __future__ import annotations

import argparse
import json
import threading
import time

from dbos import DBOS


def main() -> None:
    """Measure DBOS on the system database given and print the figures as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("--lone-steps", type=int, default=200)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--pool", type=int, default=40, help="DBOS's sys_db_pool_size")
    args = parser.parse_args()
    DBOS(
        config={
            "name": "durably-bench",
            "system_database_url": args.url,
            "run_admin_server": False,
            # DBOS's default pool (20) starves 100 threads into 30 s timeouts; 40 stays
            # under PostgreSQL's default max_connections (100).
            "sys_db_pool_size": args.pool,
        }
    )

    @DBOS.step()
    def trivial(i: int) -> dict[str, int]:
        return {"i": i}

    @DBOS.workflow()
    def many(n: int) -> int:
        for i in range(n):
            trivial(i)
        return n

    DBOS.launch()
    many(20)  # warm: connections opened, statements prepared
    t0 = time.perf_counter()
    many(args.lone_steps)
    lone = (time.perf_counter() - t0) / args.lone_steps
    start = threading.Barrier(args.runs + 1)

    def one() -> None:
        start.wait()
        many(args.steps)

    threads = [threading.Thread(target=one) for _ in range(args.runs)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    concurrent = args.runs * args.steps / (time.perf_counter() - t0)
    DBOS.destroy()
    print(json.dumps({"lone": lone, "concurrent": concurrent}))


if __name__ == "__main__":
    main()
