"""Least privilege: the receiving side's tables come from `durably migrate --idempotency`,
and the store and outbox only check them, so a role with row privileges runs them."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from durably.cli import main
from durably.errors import SchemaNotMigrated, SchemaTooNew
from durably.idempotency import IdempotencyStore, Outbox, migrate


def _tables(url: str) -> set[str]:
    if url.startswith("sqlite:///"):
        with sqlite3.connect(url[len("sqlite:///") :]) as conn:
            rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            return {r[0] for r in rows}
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        sql = (
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
        )
        return {r[0] for r in conn.execute(sql)}


def test_an_unmigrated_database_is_refused_and_left_unchanged(bare_db_url: str) -> None:
    for opener in (IdempotencyStore, Outbox):
        with pytest.raises(SchemaNotMigrated, match="durably migrate --idempotency"):
            opener(bare_db_url)
    assert not {"durably_idempotency_keys", "durably_outbox"} & _tables(bare_db_url)


def test_a_newer_schema_is_refused(db_url: str) -> None:
    outbox = Outbox(db_url)
    try:
        with outbox.transaction() as conn:
            conn.execute("UPDATE durably_idempotency_meta SET value = '99'")
    finally:
        # An unclosed pool is collected later, maybe on its own worker thread, which
        # then warns "cannot join current thread" in whatever test runs at that moment.
        outbox.close()
    with pytest.raises(SchemaTooNew, match="upgrade durably"):
        IdempotencyStore(db_url)


def test_durably_migrate_idempotency_creates_the_tables(bare_db_url: str) -> None:
    result = CliRunner().invoke(main, ["migrate", "--idempotency", "--db", bare_db_url])
    assert result.exit_code == 0, result.output
    assert "idempotency schema version 1" in result.output
    assert {"durably_idempotency_keys", "durably_outbox"} <= _tables(bare_db_url)
    IdempotencyStore(bare_db_url).close()
    Outbox(bare_db_url).close()


def test_tables_an_older_durably_created_on_start_are_adopted(tmp_path: Path) -> None:
    from durably.idempotency._db import receiving_migrations

    url = f"sqlite:///{tmp_path / 'old.db'}"
    with sqlite3.connect(tmp_path / "old.db") as conn:  # what start-up used to create
        migration = receiving_migrations("sqlite")[0].sql
        conn.executescript(
            migration.split("CREATE TABLE IF NOT EXISTS durably_idempotency_meta")[0]
        )
        conn.execute(
            "INSERT INTO durably_idempotency_keys (scope, key, fingerprint, state, token,"
            " created_at, expires_at) VALUES ('', 'k', 'fp', 'running', 't', 0, 1)"
        )
    assert migrate(url) == 1
    with sqlite3.connect(tmp_path / "old.db") as conn:
        assert conn.execute("SELECT count(*) FROM durably_idempotency_keys").fetchone() == (1,)


@pytest.fixture
def rows_only_url(pg_url: str) -> Iterator[str]:
    """A role with row privileges only on the tables an owner migrated into pg_url."""
    import psycopg

    migrate(pg_url)
    role = f"durably_rows_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        schema = conn.execute("SELECT current_schema()").fetchone()[0]  # type: ignore[index]
        conn.execute(f'CREATE ROLE "{role}" LOGIN')
        conn.execute(f'GRANT USAGE ON SCHEMA "{schema}" TO "{role}"')
        conn.execute(
            f'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "{schema}" TO "{role}"'
        )
        conn.execute(f'GRANT USAGE ON ALL SEQUENCES IN SCHEMA "{schema}" TO "{role}"')
    try:
        yield pg_url.replace("postgresql://postgres@", f"postgresql://{role}@", 1)
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f'DROP OWNED BY "{role}"')
            conn.execute(f'DROP ROLE "{role}"')


@pytest.mark.postgres
def test_a_role_with_row_privileges_only_runs_the_store_and_outbox(rows_only_url: str) -> None:
    assert rows_only_url.startswith("postgresql://durably_rows_")
    with IdempotencyStore(rows_only_url) as store:
        assert store.execute("k", "fp", lambda: {"ok": 1}).result == {"ok": 1}
        assert store.execute("k", "fp", lambda: {"ok": 2}).replayed
        assert store.purge_expired() == 0
    with Outbox(rows_only_url) as outbox:
        with outbox.transaction() as conn:
            outbox.add(conn, "billing", {"n": 1})
        assert outbox.relay(lambda message: None).delivered == 1
    import psycopg

    with psycopg.connect(rows_only_url, autocommit=True) as conn:  # the role is limited
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("CREATE TABLE not_allowed (x int)")
