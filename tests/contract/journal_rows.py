"""Read a journal's rows straight from its database (SQLite file or PostgreSQL schema),
for tests that compare everything stored before and after an operation."""

from __future__ import annotations

import sqlite3
from typing import Any

# Every table of the journal that holds rows of a run, and the column naming it.
RUN_TABLES = ("runs", "steps", "signals", "events", "budgets", "spend", "approvals", "redactions")


def _sqlite_path(url: str) -> str | None:
    return url[len("sqlite:///") :] if url.startswith("sqlite:///") else None


def _rows(url: str, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    path = _sqlite_path(url)
    if path is not None:
        conn = sqlite3.connect(path)
        try:
            return [tuple(r) for r in conn.execute(sql.format(p="?"), params).fetchall()]
        finally:
            conn.close()
    import psycopg

    with psycopg.connect(url, autocommit=True) as pg:
        return [tuple(r) for r in pg.execute(sql.format(p="%s"), params).fetchall()]  # type: ignore[arg-type]


def execute(url: str, sql: str, params: tuple[Any, ...] = ()) -> None:
    """Run one statement (``{p}`` for each parameter) and commit it."""
    path = _sqlite_path(url)
    if path is not None:
        conn = sqlite3.connect(path)
        try:
            conn.execute(sql.format(p="?"), params)
            conn.commit()
        finally:
            conn.close()
        return
    import psycopg

    with psycopg.connect(url, autocommit=True) as pg:
        pg.execute(sql.format(p="%s"), params)  # type: ignore[arg-type]


def tables(url: str) -> list[str]:
    """The journal's tables."""
    if _sqlite_path(url) is not None:
        sql = "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
    else:
        sql = "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
    return sorted(str(r[0]) for r in _rows(url, sql))


def _norm(row: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(
        bytes(v).decode("utf-8", "replace") if isinstance(v, (bytes, memoryview)) else v
        for v in row
    )


def dump(url: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, sorted (blob data as text)."""
    return {
        t: sorted((_norm(r) for r in _rows(url, f"SELECT * FROM {t}")), key=repr)
        for t in tables(url)
    }


def run_rows(url: str, run_id: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of ``run_id`` in the tables that hold a run's rows (empty ones left out)."""
    out = {}
    for t in RUN_TABLES:
        rows = sorted(
            (_norm(r) for r in _rows(url, f"SELECT * FROM {t} WHERE run_id = {{p}}", (run_id,))),
            key=repr,
        )
        if rows:
            out[t] = rows
    return out
