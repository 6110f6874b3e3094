"""Create or upgrade the receiving side's tables: the one place that runs DDL for them.

The idempotency store and the outbox only check the schema version when they open, so the
role they run as needs row privileges only (SELECT, INSERT, UPDATE, DELETE). Run this (or
``durably migrate --idempotency --db URL``) once per database, as a role allowed to create
tables, when deploying a new durably version.
"""

from __future__ import annotations

from durably.idempotency._db import open_database


def migrate(url: str) -> int:
    """Apply the receiving side's pending migrations at ``url``; return the schema version.

    Safe to run again (nothing pending: nothing changes) and from several processes at
    once (SQLite serialises on its write lock, PostgreSQL on an advisory lock). Tables an
    older durably created on start are adopted as they are.
    """
    db = open_database(url, default_pool_size=1, owner="migrate")
    try:
        return db.migrate()
    finally:
        db.close()
