"""``durably migrate``: create or upgrade a journal's schema and report its version.

Opening a store already migrates it (under a lock, so many workers starting at once are
safe); this command exists so a deploy can migrate explicitly, before any worker starts,
and see the result. ``--idempotency`` migrates the receiving side's tables instead
(idempotency keys and the outbox, a versioned sequence of their own): those are never
created on start, so services can run as a role with row privileges only.
"""

from __future__ import annotations

import json
import sqlite3

import click

from ..clock import SystemClock
from ..errors import DurablyError, StoreError
from ..redact import redact_url
from ..store.base import Store
from ..store.open import open_store
from ..store.sqlfiles import migrations
from .common import CommandError, db_option


@click.command(short_help="Create or upgrade the journal schema at --db.")
@db_option
@click.option(
    "--idempotency",
    is_flag=True,
    help="Migrate the receiving side's tables (durably.idempotency: idempotency keys and"
    " the outbox) at --db instead of the journal. Run it once per database, as a role"
    " allowed to create tables; the store and outbox only check the version on start.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def migrate(db: str, idempotency: bool, as_json: bool) -> None:
    """Create or upgrade the journal schema at --db and print its version.

    With --idempotency, the receiving side's tables instead (they may live in the same
    database as the journal or in your service's own).
    """
    if idempotency:
        _migrate_receiving_side(db, as_json)
        return
    dialect = "sqlite" if db.startswith("sqlite:") else "postgres"
    try:
        store = open_store(db, SystemClock())
        try:
            version = _schema_version(store)
        finally:
            store.close()
    except DurablyError as exc:
        raise CommandError(str(exc), as_json) from exc
    latest = migrations(dialect)[-1].version
    shown = redact_url(db)
    if as_json:
        click.echo(
            json.dumps({"db": shown, "schema_version": version, "latest": latest}, sort_keys=True)
        )
        return
    click.echo(f"{shown}: journal schema version {version} (latest known: {latest})")


def _migrate_receiving_side(db: str, as_json: bool) -> None:
    from ..idempotency import migrate as migrate_receiving_side
    from ..idempotency._db import receiving_migrations_cached

    try:
        version = migrate_receiving_side(db)
    except DurablyError as exc:
        raise CommandError(str(exc), as_json) from exc  # redacted, inert, JSON with --json
    latest = len(receiving_migrations_cached())
    shown = redact_url(db)
    if as_json:
        click.echo(
            json.dumps(
                {"db": shown, "idempotency_schema_version": version, "latest": latest},
                sort_keys=True,
            )
        )
        return
    click.echo(f"{shown}: idempotency schema version {version} (latest known: {latest})")


def _schema_version(store: Store) -> int:
    """The schema version of an open store.

    The PostgreSQL store records it when it migrates; a SQLite journal keeps it in
    ``PRAGMA user_version``, read here on a connection of its own.
    """
    version = getattr(store, "schema_version", None)
    if isinstance(version, int):
        return version
    path = getattr(store, "path", None)
    if not isinstance(path, str) or path == ":memory:":
        return migrations("sqlite")[-1].version  # a fresh in-memory journal is fully migrated
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            row = conn.execute("PRAGMA user_version").fetchone()
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise StoreError(f"cannot read the schema version of {path}: {exc}") from exc
    return int(row[0])
