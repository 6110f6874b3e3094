"""Migrated PostgreSQL journal schemas for tests, reused within one pytest process.

Creating a schema, migrating it (durably's own migrations, as a store opens it) and
dropping it afterwards costs 0.3-1.2 s of server DDL a test on a loaded machine, the
largest part of many PostgreSQL tests. A test's journal only needs to be *empty*: no
runs, today's schema. So a schema a test is done with is emptied and kept for the next
test of the same process, provided it is still exactly as its migration left it:

- no table, column, index, constraint, function or trigger added, changed or dropped,
  and ``durably_meta`` as the migration wrote it (a test may fake a newer schema
  version): a digest of the catalogs, taken right after the migration, is compared;
- no session holds the schema's owner locks (an engine or worker a test left open,
  which could go on claiming the next test's runs);
- no other session holds a lock on its tables (a connection left in a transaction): the
  emptying waits at most ``lock_timeout`` for that, then the schema is given up.

Anything else, and the schema is dropped as before and the next test gets a new one.
Every table but ``durably_meta`` is emptied with ``DELETE`` in one transaction (the
journal has no sequences: cursors and positions are the journal's own numbers). Tests
that create the journal's tables themselves (an old schema version) are marked
``pg_empty_schema`` and get an empty schema of their own. Schemas still pooled when the
process ends are dropped then.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

# One round trip: a digest of the schema's catalogs (every relation's columns, types and
# defaults, indexes, constraints, functions, triggers) and of durably_meta, and how many
# sessions hold this schema's owner locks (fleet.sql's hold_owner: an engine or worker a
# test left open, which could go on claiming the next test's runs).
CHECK_SQL = """
SELECT md5(concat_ws('|',
    (SELECT string_agg(concat_ws(',', c.relname, c.relkind, a.attname,
                                 format_type(a.atttypid, a.atttypmod), a.attnotnull,
                                 pg_get_expr(d.adbin, d.adrelid)), ';'
                       ORDER BY c.relname, a.attnum)
       FROM pg_class c
       LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
       LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
       WHERE c.relnamespace = %(s)s::regnamespace),
    (SELECT string_agg(pg_get_indexdef(i.indexrelid), ';' ORDER BY 1)
       FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
       WHERE c.relnamespace = %(s)s::regnamespace),
    (SELECT string_agg(conname || pg_get_constraintdef(oid), ';' ORDER BY 1)
       FROM pg_constraint WHERE connamespace = %(s)s::regnamespace),
    (SELECT string_agg(proname || md5(prosrc), ';' ORDER BY 1)
       FROM pg_proc WHERE pronamespace = %(s)s::regnamespace),
    (SELECT string_agg(pg_get_triggerdef(t.oid), ';' ORDER BY 1)
       FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
       WHERE c.relnamespace = %(s)s::regnamespace AND NOT t.tgisinternal),
    (SELECT string_agg(key || '=' || value, ';' ORDER BY key) FROM "{schema}".durably_meta)
  )),
  (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2
     AND classid = hashtext('durably.owner.' || %(s)s)::oid)
"""


def schema_url(server_url: str, schema: str) -> str:
    """``server_url`` with ``options=-csearch_path=<schema>``, so every connection made
    from it (subprocesses' too) works inside the schema."""
    sep = "&" if "?" in server_url else "?"
    return f"{server_url}{sep}options=-csearch_path%3D{schema}"


def create_schema(server_url: str) -> str:
    """A new, empty schema; its name."""
    import psycopg

    schema = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    return schema


def drop_schema(server_url: str, schema: str) -> None:
    """Drop ``schema`` and everything in it."""
    import psycopg

    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@contextlib.contextmanager
def fresh_schema(server_url: str) -> Iterator[str]:
    """A fresh, empty schema's URL, dropped afterwards."""
    schema = create_schema(server_url)
    try:
        yield schema_url(server_url, schema)
    finally:
        drop_schema(server_url, schema)


@dataclass
class JournalPool:
    """Migrated, empty journal schemas of one pytest process (see the module's doc). One
    connection of its own checks and empties them: a schema handed back costs two round
    trips, where a new one cost three connections and the DDL of every migration."""

    server_url: str
    free: list[str] = field(default_factory=list)
    digests: dict[str, str] = field(default_factory=dict)
    deletes: dict[str, str] = field(default_factory=dict)
    _admin: Any = None

    @contextlib.contextmanager
    def journal(self) -> Iterator[str]:
        """The URL of an empty journal of today's schema, for one test (or module)."""
        schema = self.free.pop() if self.free else self._new()
        try:
            yield schema_url(self.server_url, schema)
        finally:
            if self._emptied(schema):
                self.free.append(schema)
            else:
                self._forget(schema)

    def close(self) -> None:
        """Drop every pooled schema, and close the pool's connection."""
        while self.free:
            self._forget(self.free.pop())
        if self._admin is not None:
            self._admin.close()
            self._admin = None

    def _conn(self) -> Any:
        import psycopg

        if self._admin is None or self._admin.closed:
            self._admin = psycopg.connect(self.server_url, autocommit=True)
        return self._admin

    def _forget(self, schema: str) -> None:
        self.digests.pop(schema, None)
        self.deletes.pop(schema, None)
        drop_schema(self.server_url, schema)

    def _new(self) -> str:
        from durably.clock import FakeClock
        from durably.store.postgres import PostgresStore

        schema = create_schema(self.server_url)
        PostgresStore(schema_url(self.server_url, schema), FakeClock()).close()  # migrates
        digest, _locks = self._check(schema)
        names = [
            n
            for (n,) in self._conn().execute(
                "SELECT tablename FROM pg_tables"
                " WHERE schemaname = %s AND tablename <> 'durably_meta'",
                (schema,),
            )
        ]
        refs = self._conn().execute(
            "SELECT conrelid::regclass::text, confrelid::regclass::text FROM pg_constraint"
            " WHERE contype = 'f' AND connamespace = %s::regnamespace",
            (schema,),
        )
        self.digests[schema] = digest
        self.deletes[schema] = "; ".join(
            f'DELETE FROM "{schema}"."{n}"' for n in referrers_first(names, list(refs), schema)
        )
        return schema

    def _check(self, schema: str) -> tuple[str, int]:
        row = self._conn().execute(CHECK_SQL.replace("{schema}", schema), {"s": schema}).fetchone()
        return str(row[0]), int(row[1])

    def _emptied(self, schema: str) -> bool:
        """Empty ``schema`` for the next test when it is still as migrated; False (and
        nothing emptied) when it is not, or when another session holds a lock in it."""
        import psycopg

        try:
            if self._check(schema) != (self.digests[schema], 0):
                return False
            # One query string is one transaction. DELETE, not TRUNCATE: a test leaves a
            # few rows, and TRUNCATE made new files for every table and index (slower than
            # the DDL it saves). It waits at most 2 s for another session's lock (a
            # connection a test left in a transaction), then gives the schema up.
            self._conn().execute(
                f"SET lock_timeout = '2s'; {self.deletes[schema]}; RESET lock_timeout"
            )
            return True
        except psycopg.Error:  # a lock held elsewhere, a schema a test dropped...
            if self._admin is not None and self._admin.closed:
                self._admin = None
            return False


def referrers_first(tables: list[str], refs: list[tuple[str, str]], schema: str) -> list[str]:
    """``tables`` ordered so that a table whose foreign key references another comes
    before it (``refs``: (referring, referenced) as regclass text, maybe schema-qualified)."""

    def bare(name: str) -> str:
        return name.split(".")[-1].strip('"')

    edges = [(bare(a), bare(b)) for a, b in refs if bare(a) != bare(b)]
    done: list[str] = []
    left = sorted(tables)
    while left:
        # Ready: the tables that no table still left refers to.
        ready = [t for t in left if not any(b == t and a in left for a, b in edges)]
        if not ready:  # a cycle: the order cannot satisfy it, the DELETE will say so
            ready = left[:1]
        done += ready
        left = [t for t in left if t not in ready]
    return done
