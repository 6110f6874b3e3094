"""A step's write costs the same at its run's 10th step and its 10,000th (PostgreSQL),
and touches one page of the dedupe index for its two events (SQLite).

Every live step runs ``append_with_events`` (its record and events in one statement), and
psycopg prepares it after a few calls, so the server reuses one generic plan, made without
the parameters' values. Checked here on a journal whose statistics say runs have few
events (many short runs analysed) and one long run written after: the generic plan probes
the dedupe index once per new event and reads none of the run's other events (a hash anti
join there hashed every one of them at each step); and the query text is short enough for
psycopg to cache its parsing (a longer one is parsed again at every call). On SQLite a
step's ``step.started`` and ``step.completed`` dedupes sort side by side, so the unique
dedupe index takes both entries in one leaf page (each page is a WAL write of 4 KB).
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any

import psycopg
import pytest

import durably
from durably.clock import FakeClock
from durably.events import new_event
from durably.store.postgres import PostgresStore, _events_sql
from durably.store.sqlfiles import load_queries

LONG_RUN_EVENTS = 5_000
# psycopg.\_queries.MAX_CACHED_STATEMENT_LENGTH: the longest query text whose conversion
# psycopg keeps (private, so restated here).
PSYCOPG_CACHED_QUERY_BYTES = 4096

_BULK_RUNS = """
INSERT INTO runs (run_id, workflow, queue, input, input_digest, codec_version, status,
                  created_at, updated_at, fencing_token, last_event)
SELECT 'short-' || x, 'wf', 'default', '{}', 'd', 1, 'completed', x, x, 1, 2
FROM generate_series(1, 2000) AS s (x)
"""
_SHORT_EVENTS = """
INSERT INTO events (run_id, cursor, kind, position, data, at, dedupe)
SELECT 'short-' || x, c, 'user', '0', '{}', 0, 'e:' || c
FROM generate_series(1, 2000) AS r (x), generate_series(1, 2) AS s (c)
"""
_LONG_EVENTS = """
INSERT INTO events (run_id, cursor, kind, position, data, at, dedupe)
SELECT 'long', c, 'user', '0', '{}', 0, 'e:' || c FROM generate_series(1, %s) AS s (c)
"""


def test_per_step_queries_fit_psycopg_query_cache() -> None:
    queries = load_queries("postgres")
    for name in ("append_record", "write_events", "append_with_events"):
        for count in (1, 2, 8, 9):
            text = _events_sql(name, count) if "{events}" in queries[name] else queries[name]
            assert len(text.encode()) <= PSYCOPG_CACHED_QUERY_BYTES, (name, count)


@pytest.mark.postgres
@pytest.mark.parametrize("count", [2, 12])
def test_generic_plan_of_a_step_write_reads_none_of_the_run_events(pg_url: str, count: int) -> None:
    store = PostgresStore(pg_url, FakeClock())
    store.close()  # the schema; _event_params needs no connection
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(_BULK_RUNS)
        conn.execute(_SHORT_EVENTS)
        conn.execute("ANALYZE runs")
        conn.execute("ANALYZE events")
        # The long run, written after the statistics were taken (as autovacuum leaves them).
        conn.execute(
            "INSERT INTO runs (run_id, workflow, queue, input, input_digest, codec_version,"
            " status, created_at, updated_at, fencing_token, last_event) VALUES ('long',"
            " 'wf', 'default', '{}', 'd', 1, 'running', 0, 0, 1, %s)",
            (LONG_RUN_EVENTS,),
        )
        conn.execute(_LONG_EVENTS, (LONG_RUN_EVENTS,))
        params: dict[str, Any] = {
            "run_id": "long",
            "token": 1,
            "position": "9",
            "kind": "step",
            "name": "s",
            "input_digest": "d" * 64,
            "status": "ok",
            "output": "1",
            "error_type": None,
            "error_message": None,
            "attempts": 1,
            "started_at": 1.0,
            "finished_at": 2.0,
            "usage_tokens": None,
            "usage_cost_usd": None,
            "inputs": None,
        }
        events = [new_event("user", "9", {"i": i}, 1.0, f"new:{i}") for i in range(count)]
        params.update(store._event_params("long", events))
        plan = _generic_plan(conn, _events_sql("append_with_events", count), params)
    nodes = list(_nodes(plan))
    assert not [n for n in nodes if "Hash" in n["Node Type"]], nodes
    reads = [n for n in nodes if n.get("Relation Name") == "events" and "Scan" in n["Node Type"]]
    assert reads, nodes
    assert all(n["Node Type"] == "Index Only Scan" for n in reads), reads
    read = sum(n.get("Actual Rows", 0) * n.get("Actual Loops", 1) for n in reads)
    assert read == 0, reads  # no event of the run is read: each new one is one probe


def _generic_plan(conn: psycopg.Connection[Any], query: str, params: dict[str, Any]) -> Any:
    """EXPLAIN ANALYZE of ``query`` as a prepared statement forced onto its generic plan
    (what the server runs once psycopg has prepared it), in a transaction rolled back."""
    names: list[str] = []

    def number(m: re.Match[str]) -> str:
        if m.group(1) not in names:
            names.append(m.group(1))
        return f"${names.index(m.group(1)) + 1}"

    positional = re.sub(r"%\((\w+)\)s", number, query)
    conn.execute("SET plan_cache_mode = force_generic_plan")
    conn.execute(("PREPARE step_write AS " + positional).encode())
    values = [params[n] for n in names]
    with conn.transaction(force_rollback=True):
        cur = psycopg.ClientCursor(conn)
        marks = ", ".join("%s" for _ in values)
        sql = f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE step_write ({marks})"
        row = cur.execute(sql.encode(), values).fetchone()
    assert row is not None
    return row[0][0]["Plan"]


def _nodes(plan: dict[str, Any]) -> Any:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


def test_sqlite_a_step_events_sit_side_by_side_in_the_dedupe_index(tmp_path: Path) -> None:
    engine = durably.Engine(f"sqlite:///{tmp_path / 'j.db'}")

    @engine.workflow()
    def flow(ctx: durably.Context) -> int:
        for i in range(12):  # positions 0..11: "10" sorts before "2" as text
            ctx.step("s", abs, -i)
        return 0

    engine.run(flow, run_id="r")
    engine.close()
    conn = sqlite3.connect(tmp_path / "j.db")
    rows = conn.execute(
        "SELECT kind, position FROM events WHERE run_id = 'r' AND position IS NOT NULL"
        " ORDER BY dedupe"  # the order of the dedupe index's entries
    ).fetchall()
    conn.close()
    assert len(rows) == 24
    for started, completed in zip(rows[::2], rows[1::2], strict=True):
        assert started[1] == completed[1], rows  # one position after the other
        assert {started[0], completed[0]} == {"step.started", "step.completed"}, rows
