"""The dashboard's runs page with 100,000 runs in the journal, and a 1,000-step run live.

Prints, from one run on one SQLite journal:
- the median response time of ``GET /runs`` (and its filtered, searched and second-page
  forms) through a real uvicorn server on 127.0.0.1, against the baseline of the same
  reads made directly (``engine.list_runs`` + ``engine.count_runs``), and their ratio;
  the issue's target is under 300 ms for the page;
- the run page of a 1,000-step run, and its whole event stream read over SSE.

The journal is seeded through the public API (a few hundred runs in each state), then
copied row by row in SQL to reach the count: the bench measures reads, and creating
100,000 runs through ``engine.start`` would only measure commits.

Run: ``python bench/ui_runs.py [--runs N] [--repeat R] [--dir PATH]``.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

import durably
from durably.ui import create_app, security_for

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.ui.conftest import Server  # the tests' real uvicorn server, in a thread

SEED_PER_STATE = 100


def seed(url: str, path: Path, runs: int) -> None:
    """``runs`` runs: parked, completed and failed ones through the engine, copied."""
    engine = durably.Engine(url, park_wait_s=0, synchronous="NORMAL")

    @engine.workflow(name="refund", version="2")
    def refund(ctx: durably.Context, n: int) -> Any:
        ctx.step("lookup", lambda: {"n": n})
        return ctx.request_approval("refund", {"n": n}).outcome

    @engine.workflow(name="agent")
    def agent(ctx: durably.Context, n: int) -> int:
        return int(ctx.step("work", lambda: n))

    @engine.workflow(name="boom")
    def boom(ctx: durably.Context, n: int) -> None:
        ctx.step("explode", _explode)

    for i in range(SEED_PER_STATE):
        try:
            engine.run("refund", i, run_id=f"seed-refund-{i}")
        except durably.RunParked:
            pass
        engine.run("agent", i, run_id=f"seed-agent-{i}")
        try:
            engine.run("boom", i, run_id=f"seed-boom-{i}")
        except durably.WorkflowFailed:
            pass
        engine.start("agent", i, run_id=f"seed-queued-{i}")
    engine.close()
    seeded = 4 * SEED_PER_STATE
    conn = sqlite3.connect(path)
    cols = [r[1] for r in conn.execute("PRAGMA table_info(runs)")]
    rest = ", ".join(c for c in cols if c not in ("run_id", "created_at"))
    copies = (runs - seeded + seeded - 1) // seeded
    with conn:
        for k in range(copies):
            conn.execute(
                f"INSERT INTO runs (run_id, created_at, {rest})"
                f" SELECT 'copy{k}-' || run_id, created_at - ? , {rest} FROM runs"
                " WHERE run_id LIKE 'seed-%'",
                (k + 1,),
            )
    conn.execute(
        "DELETE FROM runs WHERE run_id IN (SELECT run_id FROM runs"
        " ORDER BY created_at LIMIT max(0, (SELECT count(*) FROM runs) - ?))",
        (runs,),
    )
    conn.commit()
    conn.close()


def _explode() -> None:
    raise ValueError("broke")


def median_ms(fn: Any, repeat: int) -> float:
    fn()  # warm
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def long_run(url: str, steps: int) -> str:
    engine = durably.Engine(url, synchronous="NORMAL")

    @engine.workflow(name="long")
    def long(ctx: durably.Context) -> int:
        for i in range(steps):
            ctx.step(f"s{i}", lambda i=i: i)
        return steps

    engine.run("long", run_id="long-1")
    engine.close()
    return "long-1"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--dir", type=Path, default=None)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=a.dir) as d:
        path = Path(d) / "journal.db"
        url = f"sqlite:///{path}"
        t0 = time.perf_counter()
        seed(url, path, a.runs)
        run_id = long_run(url, a.steps)
        engine = durably.Engine(url)
        total = sum(engine.count_runs().values())
        print(f"journal: {total:,} runs (seeded in {time.perf_counter() - t0:.1f} s)")
        sec = security_for("127.0.0.1", env={})
        server = Server(create_app(engine, sec, db_label="bench"))
        client = httpx.Client(base_url=server.url, timeout=60)
        client.get(f"/runs?token={sec.login_token}")
        second = engine.list_runs(limit=50).next
        cases: list[tuple[str, str, dict[str, Any]]] = [
            ("runs page", "/runs", {}),
            ("status=parked", "/runs?status=parked", {"status": "parked"}),
            ("workflow=agent", "/runs?workflow=agent", {"workflow": "agent"}),
            ("search q=refund-7", "/runs?q=refund-7", {"search": "refund-7"}),
            ("second page", f"/runs?after={second}", {"after": second}),
        ]
        print(f"{'GET':<20}{'page ms':>10}{'API ms':>10}{'ratio':>8}")
        worst = 0.0
        for label, path_q, kw in cases:

            def page(path_q: str = path_q) -> None:
                r = client.get(path_q)
                assert r.status_code == 200, r.text[:300]

            def api(kw: dict[str, Any] = kw) -> None:
                engine.list_runs(limit=50, **kw)
                counts = {k: v for k, v in kw.items() if k != "status" and k != "after"}
                engine.count_runs(**counts)

            p, b = median_ms(page, a.repeat), median_ms(api, a.repeat)
            worst = max(worst, p)
            print(f"{label:<20}{p:>10.1f}{b:>10.1f}{p / b:>8.2f}")
        print(f"slowest runs page median: {worst:.1f} ms (target < 300 ms)")

        def run_page() -> None:
            assert client.get(f"/run?id={run_id}").status_code == 200

        def history() -> None:
            engine.history(run_id)
            engine.get_run(run_id)

        p, b = median_ms(run_page, max(3, a.repeat // 3)), median_ms(history, a.repeat)
        print(f"run page of a {a.steps:,}-step run: {p:.1f} ms (reading its history: {b:.1f} ms)")
        t0 = time.perf_counter()
        body = client.get(f"/run/events?id={run_id}").text
        took = time.perf_counter() - t0
        n = body.count("\nevent: journal\n")
        print(f"its event stream over SSE: {n:,} events in {took * 1000:.0f} ms")
        client.close()
        server.stop()
        engine.close()


if __name__ == "__main__":
    main()
