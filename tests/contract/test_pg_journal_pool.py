"""The pool of reused PostgreSQL journal schemas (``tests/pg_journals.py``) hands a schema
to the next test only when it is empty and exactly as migrated: a schema a test changed,
or one an engine it left open still holds, is dropped instead."""

from __future__ import annotations

from collections.abc import Callable

import psycopg
import pytest

import durably
from tests.pg_journals import JournalPool

pytestmark = pytest.mark.postgres


def _schema(url: str) -> str:
    return url.rsplit("%3D", 1)[1]


def _run_one(url: str) -> None:
    with durably.Engine(url) as engine:
        engine.workflow(name="w")(lambda ctx: ctx.step("a", lambda: 1))
        engine.run("w", run_id="r")


def _sql(url: str, statement: str) -> Callable[[str], None]:
    def change(_: str) -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(statement)

    return change


def test_a_schema_comes_back_empty_and_a_changed_one_is_dropped(pg_server_url: str) -> None:
    pool = JournalPool(pg_server_url)
    try:
        with pool.journal() as url:
            first = _schema(url)
            _run_one(url)
        with pool.journal() as url:
            assert _schema(url) == first  # reused...
            with durably.Engine(url) as engine:
                assert engine.store.list_runs() == []  # ...and empty
        changes = {
            "a column": "ALTER TABLE runs ADD COLUMN extra int",
            "an index": "CREATE INDEX extra_idx ON runs (status, run_id)",
            "durably_meta": "UPDATE durably_meta SET value = '999' WHERE key = 'schema_version'",
            "a table": "CREATE TABLE extra (x int)",
        }
        for what, statement in changes.items():
            with pool.journal() as url:
                used = _schema(url)
                _sql(url, statement)(url)
            assert used not in pool.free, f"a schema with {what} changed was kept"
        with pool.journal() as url:
            left_open = durably.Engine(url)  # holds its owner lock once it has claimed
            left_open.workflow(name="w")(lambda ctx: 1)
            left_open.run("w", run_id="r")
            held = _schema(url)
        assert held not in pool.free, "a schema an open engine holds was kept"
        left_open.close()
    finally:
        pool.close()
