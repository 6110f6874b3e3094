"""Golden journals as JSON: export one run from a SQLite journal, load it into a fresh
journal of either kind, and snapshot a journal's rows (to show a replay wrote nothing).

A golden file holds what the journal held for one run, table by table, as durably wrote
it, plus the schema version it was written at. Loading builds the schema exactly as it
was at that version (the journal's own migrations, applied up to it), inserts the rows
with plain SQL, and leaves the rest to ``durably.Engine``: opening the journal migrates
it to today's schema as it would any old journal. So a golden written today keeps
pinning what reading today's journals takes after later migrations.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from durably.store.sqlfiles import migrations

# The tables that hold a run's replayable state, in an order that satisfies their foreign
# keys. Events (the stream), workers and the meta table are not part of a replay.
TABLES = ("runs", "steps", "blobs", "signals", "approvals", "budgets", "spend")
# How each table's rows are ordered in a golden file (and in a snapshot).
ORDER = {
    "runs": "run_id",
    "steps": "generation, position",
    "blobs": "digest",
    "signals": "seq",
    "approvals": "request_id",
    "budgets": "run_id",
    "spend": "entry",
}
APP_NAME = "durably"  # durably_meta's app row, as the stores write it


def _sqlite_path(url: str) -> str:
    assert url.startswith("sqlite:///"), url
    return url[len("sqlite:///") :]


def export(url: str, run_id: str) -> dict[str, Any]:
    """Everything a SQLite journal holds for ``run_id`` (and every blob), as JSON data."""
    conn = sqlite3.connect(_sqlite_path(url))
    conn.row_factory = sqlite3.Row
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        out: dict[str, Any] = {"schema_version": version}
        for table in TABLES:
            where = "" if table == "blobs" else " WHERE run_id = ?"
            params = () if table == "blobs" else (run_id,)
            rows = conn.execute(
                f"SELECT * FROM {table}{where} ORDER BY {ORDER[table]}", params
            ).fetchall()
            out[table] = [_plain(table, dict(r)) for r in rows]
    finally:
        conn.close()
    return out


def _plain(table: str, row: dict[str, Any]) -> dict[str, Any]:
    """A row as JSON data: blob payloads (UTF-8 JSON text stored as bytes) as text."""
    if table == "blobs":
        row["data"] = bytes(row["data"]).decode("utf-8")
    return row


def _stored(table: str, row: dict[str, Any]) -> dict[str, Any]:
    if table == "blobs":
        return {**row, "data": row["data"].encode("utf-8")}
    return row


def create_journal(url: str, schema_version: int) -> None:
    """An empty journal at ``url`` with the schema as it was at ``schema_version``."""
    dialect = "sqlite" if url.startswith("sqlite") else "postgres"
    steps = migrations(dialect)[:schema_version]
    assert len(steps) == schema_version, f"no migration {schema_version} of {dialect}"
    if dialect == "sqlite":
        conn = sqlite3.connect(_sqlite_path(url))
        try:
            for mig in steps:
                conn.executescript(mig.sql)
            conn.execute(f"PRAGMA user_version = {schema_version}")
            conn.execute("INSERT INTO durably_meta (key, value) VALUES ('app', ?)", (APP_NAME,))
            conn.commit()
        finally:
            conn.close()
        return
    import psycopg

    with psycopg.connect(url, autocommit=True) as pg, pg.transaction():
        for mig in steps:
            pg.execute(mig.sql.encode())
        pg.execute(
            "INSERT INTO durably_meta (key, value) VALUES ('app', %s), ('schema_version', %s)",
            (APP_NAME, str(schema_version)),
        )


def insert(url: str, golden: dict[str, Any]) -> None:
    """Insert a golden file's rows into the journal at ``url`` (created at the file's
    schema version). A blob already there (another golden's) is kept."""
    if url.startswith("sqlite"):
        conn = sqlite3.connect(_sqlite_path(url))
        try:
            with conn:
                for table, row in _rows(golden):
                    conn.execute(_insert_sql(table, row, "?"), tuple(row.values()))
        finally:
            conn.close()
        return
    import psycopg

    with psycopg.connect(url, autocommit=True) as pg, pg.transaction():
        for table, row in _rows(golden):
            pg.execute(_insert_sql(table, row, "%s"), tuple(row.values()))


def _rows(golden: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(t, _stored(t, row)) for t in TABLES for row in golden[t]]


def _insert_sql(table: str, row: dict[str, Any], mark: str) -> str:
    cols = ", ".join(row)
    marks = ", ".join(mark for _ in row)
    tail = " ON CONFLICT (digest) DO NOTHING" if table == "blobs" else ""
    return f"INSERT INTO {table} ({cols}) VALUES ({marks}){tail}"


def load(url: str, golden: dict[str, Any]) -> None:
    """A fresh journal at ``url`` holding the golden run."""
    create_journal(url, golden["schema_version"])
    insert(url, golden)


def snapshot(url: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table of the journal, in a fixed order: two equal snapshots
    taken around a replay show it wrote nothing."""
    if url.startswith("sqlite"):
        conn = sqlite3.connect(f"file:{_sqlite_path(url)}?mode=ro", uri=True)
        try:
            tables = [
                r[0]
                for r in conn.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
                )
            ]
            return {
                t: sorted(conn.execute(f"SELECT * FROM {t}").fetchall(), key=repr) for t in tables
            }
        finally:
            conn.close()
    import psycopg

    with psycopg.connect(url) as pg:
        tables = [
            r[0]
            for r in pg.execute(
                "SELECT table_name FROM information_schema.tables"
                " WHERE table_schema = current_schema() ORDER BY table_name"
            )
        ]
        return {t: sorted(pg.execute(f"SELECT * FROM {t}").fetchall(), key=repr) for t in tables}
