"""Applying every migration to an empty database yields exactly ``schema.sql``.

``schema.sql`` is what people read; the migrations are what databases run. This test keeps
the two from drifting apart, for each dialect, by comparing the structure the database
itself reports (columns, keys, indexes, constraints), not the SQL text.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from durably.clock import FakeClock
from durably.store.sqlfiles import migrations, schema
from durably.store.sqlite import SQLiteStore


def _sqlite_structure(path: Path) -> dict[str, Any]:
    conn = sqlite3.connect(path)
    try:
        out: dict[str, Any] = {}
        tables = conn.execute(
            "SELECT name, type FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY name"
        ).fetchall()
        for name, kind in tables:
            if kind == "table":
                out[name] = {
                    "columns": conn.execute(f"PRAGMA table_xinfo('{name}')").fetchall(),
                    "foreign_keys": conn.execute(f"PRAGMA foreign_key_list('{name}')").fetchall(),
                    "indexes": sorted(
                        (
                            row[1],
                            row[2],
                            row[3],
                            conn.execute(f"PRAGMA index_xinfo('{row[1]}')").fetchall(),
                        )
                        for row in conn.execute(f"PRAGMA index_list('{name}')")
                    ),
                    "without_rowid": conn.execute(
                        "SELECT wr FROM pragma_table_list WHERE name = ?", (name,)
                    ).fetchone(),
                }
            else:
                sql = conn.execute(
                    "SELECT sql FROM sqlite_master WHERE name = ?", (name,)
                ).fetchone()[0]
                out[name] = {"kind": kind, "sql": " ".join((sql or "").split())}
        return out
    finally:
        conn.close()


def test_sqlite_migrations_match_schema(tmp_path: Path) -> None:
    migrated = tmp_path / "migrated.db"
    SQLiteStore(f"sqlite:///{migrated}", FakeClock()).close()
    direct = tmp_path / "direct.db"
    conn = sqlite3.connect(direct)
    conn.executescript(schema("sqlite"))
    conn.close()
    got, want = _sqlite_structure(migrated), _sqlite_structure(direct)
    assert set(got) == set(want) and "steps" in got
    for table in want:
        assert got[table] == want[table], f"table {table} differs from schema.sql"
    with sqlite3.connect(migrated) as check:
        version = check.execute("PRAGMA user_version").fetchone()[0]
    assert version == migrations("sqlite")[-1].version


# -- PostgreSQL -----------------------------------------------------------------------------

_PG_COLUMNS = """
SELECT table_name, column_name, ordinal_position, data_type, is_nullable, column_default,
       is_identity, identity_generation, character_maximum_length, numeric_precision
FROM information_schema.columns WHERE table_schema = %(s)s
ORDER BY table_name, ordinal_position
"""
_PG_INDEXES = """
SELECT tablename, indexname, replace(indexdef, %(s)s || '.', '')
FROM pg_indexes WHERE schemaname = %(s)s ORDER BY tablename, indexname
"""
_PG_CONSTRAINTS = """
SELECT cl.relname, con.conname, con.contype,
       replace(pg_get_constraintdef(con.oid), %(s)s || '.', '')
FROM pg_constraint con JOIN pg_class cl ON cl.oid = con.conrelid
JOIN pg_namespace ns ON ns.oid = cl.relnamespace
WHERE ns.nspname = %(s)s ORDER BY cl.relname, con.conname
"""


@pytest.fixture
def pg_two_schemas(pg_server_url: str) -> Iterator[tuple[str, str, str]]:
    """Two fresh, empty schemas on the test server: (server url, schema a, schema b)."""
    import psycopg

    names = (f"t_{uuid.uuid4().hex[:12]}", f"t_{uuid.uuid4().hex[:12]}")
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        for name in names:
            conn.execute(f'CREATE SCHEMA "{name}"')
    yield pg_server_url, names[0], names[1]
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        for name in names:
            conn.execute(f'DROP SCHEMA "{name}" CASCADE')


def _pg_structure(conn: Any, name: str) -> dict[str, list[tuple[Any, ...]]]:
    return {
        what: conn.execute(sql, {"s": name}).fetchall()
        for what, sql in (
            ("columns", _PG_COLUMNS),
            ("indexes", _PG_INDEXES),
            ("constraints", _PG_CONSTRAINTS),
        )
    }


@pytest.mark.postgres
def test_postgres_migrations_match_schema(pg_two_schemas: tuple[str, str, str]) -> None:
    import psycopg

    from durably.store.postgres import PostgresStore

    server, migrated, direct = pg_two_schemas
    sep = "&" if "?" in server else "?"
    store = PostgresStore(f"{server}{sep}options=-csearch_path%3D{migrated}", FakeClock())
    assert store.schema_version == migrations("postgres")[-1].version
    store.close()
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{direct}"')
        conn.execute(schema("postgres").encode())
        got, want = _pg_structure(conn, migrated), _pg_structure(conn, direct)
    assert {row[0] for row in want["columns"]} >= {"runs", "steps", "durably_meta"}
    for what in want:
        assert got[what] == want[what], f"{what} of the migrated schema differ from schema.sql"


# -- the receiving side's own sequence (durably.idempotency) --------------------------------


def _receiving_schema(dialect: str) -> str:
    import durably.idempotency

    path = Path(durably.idempotency.__file__).parent / "sql" / dialect / "schema.sql"
    return path.read_text(encoding="utf-8")


def test_receiving_side_sqlite_migrations_match_schema(tmp_path: Path) -> None:
    from durably.idempotency import migrate

    migrated = tmp_path / "migrated.db"
    assert migrate(f"sqlite:///{migrated}") == 1
    assert migrate(f"sqlite:///{migrated}") == 1  # again: nothing pending, nothing changes
    direct = tmp_path / "direct.db"
    conn = sqlite3.connect(direct)
    conn.executescript(_receiving_schema("sqlite"))
    conn.close()
    got, want = _sqlite_structure(migrated), _sqlite_structure(direct)
    assert {"durably_idempotency_keys", "durably_outbox", "durably_idempotency_meta"} <= set(want)
    assert got == want


@pytest.mark.postgres
def test_receiving_side_postgres_migrations_match_schema(
    pg_two_schemas: tuple[str, str, str],
) -> None:
    import psycopg

    from durably.idempotency import migrate

    server, migrated, direct = pg_two_schemas
    sep = "&" if "?" in server else "?"
    assert migrate(f"{server}{sep}options=-csearch_path%3D{migrated}") == 1
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{direct}"')
        conn.execute(_receiving_schema("postgres").encode())
        got = _unqualified(_pg_structure(conn, migrated), migrated)
        want = _unqualified(_pg_structure(conn, direct), direct)
    assert {row[0] for row in want["columns"]} >= {"durably_idempotency_keys", "durably_outbox"}
    for what in want:
        assert got[what] == want[what], f"{what} of the migrated schema differ from schema.sql"


def _unqualified(structure: dict[str, list[tuple[Any, ...]]], schema_name: str) -> dict[str, Any]:
    """The structure with the schema's name dropped where PostgreSQL qualifies with it (a
    serial column's default names its sequence so when the schema is not on the path)."""
    prefix = f"{schema_name}."
    return {
        what: [
            tuple(v.replace(prefix, "") if isinstance(v, str) else v for v in row) for row in rows
        ]
        for what, rows in structure.items()
    }


@pytest.mark.parametrize("names", [["0001_a", "0003_c"], ["0001_a", "0002_b", "0002_c"]])
def test_a_gap_or_a_repeat_in_the_migration_numbers_is_refused(
    tmp_path: Path, names: list[str]
) -> None:
    """A journal records only the number it reached: a migration numbered below it (a gap
    filled by a branch merged later) would never run there."""
    from durably.store import sqlfiles

    folder = tmp_path / "sqlite" / "migrations"
    folder.mkdir(parents=True)
    for n in names:
        (folder / f"{n}.sql").write_text("SELECT 1;")
    with pytest.raises(RuntimeError, match="without a gap or a repeat"):
        sqlfiles.migrations("sqlite", root=str(tmp_path))
