"""A claim over a journal full of finished runs reads none of them (issue 8 §5).

Each store's claim query is checked two ways over 100,000 finished runs (inserted in bulk
with SQL): the planner's own account (EXPLAIN QUERY PLAN on SQLite, EXPLAIN ANALYZE after
ANALYZE on PostgreSQL) names the claim index and no scan of the table, and the work done
(SQLite virtual-machine steps; PostgreSQL rows read and thrown away) is far below what
reading the finished runs would cost.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import psycopg
import pytest

from durably.clock import FakeClock
from durably.store.base import NewRun, Owner
from durably.store.postgres import PostgresStore
from durably.store.sqlfiles import load_queries
from durably.store.sqlite import SQLiteStore

FINISHED = 100_000
ME = Owner("node", 1, "1", "m:b:1")
DIGEST = "0" * 64


def _runnable(store: Any) -> None:
    store.create_run(NewRun("runnable", "wf", None, None, "default", "{}", DIGEST, 1))


_BULK = """
INSERT INTO runs (run_id, workflow, queue, input, input_digest, codec_version, status,
                  created_at, updated_at, finished_at)
SELECT 'done-' || {i}, 'wf', 'default', '{{}}', '{digest}', 1, 'completed', {i}, {i}, {i}
FROM {series}
"""


def test_sqlite_claim_uses_the_index_and_reads_no_finished_run(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    SQLiteStore(url, FakeClock()).close()
    conn = sqlite3.connect(tmp_path / "j.db")
    series = f"(WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < {FINISHED}) SELECT x FROM n)"  # noqa: E501
    conn.execute(_BULK.format(i="x", digest=DIGEST, series=series))
    conn.commit()
    conn.execute("ANALYZE")
    conn.close()
    store = SQLiteStore(url, FakeClock(2e9))  # every finished run is older than the new one
    try:
        _runnable(store)
        params = {
            "queues": json.dumps(["default"]),
            "served": json.dumps({"wf": [None]}),
            "now": 2e9,
            "dead": "[]",
        }
        owners = {"now": 2e9, "pattern": ME.host_pattern(), "limit": 1024}
        for name, args in (("next_runnable", params), ("same_host_owners", owners)):
            query = load_queries("sqlite")[name]
            with store._lock:
                plan = [r[3] for r in store._conn.execute("EXPLAIN QUERY PLAN " + query, args)]
            main = [p for p in plan if " runs " in f" {p} "]
            assert main, (name, plan)
            assert all("runs_claimable" in p or "runs_by_status" in p for p in main), (name, plan)

        steps = 0

        def count() -> int:
            nonlocal steps
            steps += 1
            return 0

        # One callback per 100 VM instructions: reading 100,000 rows would take thousands.
        with store._lock:
            store._conn.set_progress_handler(count, 100)
        got = store.claim_next(ME, 30, 10, lambda _: False, {"wf": {None}}, ["default"])
        with store._lock:
            store._conn.set_progress_handler(None, 100)
        assert got is not None and got.run_id == "runnable"
        assert steps < FINISHED // 1000, steps
    finally:
        store.close()


@pytest.mark.postgres
def test_postgres_claim_uses_the_index_and_reads_no_finished_run(pg_url: str) -> None:
    store = PostgresStore(pg_url, FakeClock(2e9))
    try:
        series = f"generate_series(1, {FINISHED}) AS s (x)"
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(_BULK.format(i="x", digest=DIGEST, series=series).encode())
            conn.execute("ANALYZE runs")
        _runnable(store)
        params = {
            "queues": ["default"],
            "workflows": ["wf"],
            "versions": [None],
            "now": 2e9,
            "dead": [],
        }
        owners = {"now": 2e9, "pattern": ME.host_pattern(), "limit": 1024}
        for name, args in (("next_runnable", params), ("same_host_owners", owners)):
            query = load_queries("postgres")[name]
            with psycopg.connect(pg_url) as conn:  # one transaction, rolled back
                row = conn.execute(
                    ("EXPLAIN (ANALYZE, FORMAT JSON) " + query).encode(), args
                ).fetchone()
                conn.rollback()
            assert row is not None
            nodes = list(_nodes(row[0][0]["Plan"]))
            scans = [n for n in nodes if n.get("Relation Name") == "runs"]
            assert scans and all("Index" in n["Node Type"] for n in scans), (name, scans)
            claim_indexes = ("runs_claimable", "runs_by_status")
            assert all(n.get("Index Name") in claim_indexes for n in scans), (name, scans)
            read = sum(n.get("Actual Rows", 0) + n.get("Rows Removed by Filter", 0) for n in scans)
            assert read < 100, (name, nodes)
        got = store.claim_next(ME, 30, 10, lambda _: False, {"wf": {None}}, ["default"])
        assert got is not None and got.run_id == "runnable"
    finally:
        store.close()


def _nodes(plan: dict[str, Any]) -> Any:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)
