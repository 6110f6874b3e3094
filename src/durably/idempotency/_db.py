"""The two databases the receiving side runs on, behind one small interface.

:class:`Database` opens transactions; :class:`Tx` runs named queries from the ``.sql`` files
in ``sql/<dialect>/``. Everything dialect-specific (connections, locking, parameter style)
stays in this module so the store and the outbox read the same on SQLite and PostgreSQL.
psycopg is imported only when a PostgreSQL URL is opened, so ``import durably`` stays fast.
"""

from __future__ import annotations

import os
import re
import sqlite3
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from functools import cache
from importlib import resources
from typing import Any, Final
from urllib.parse import urlsplit

from durably._fork import ForkGate, reset_after_fork
from durably.errors import ConfigError, SchemaNotMigrated, SchemaTooNew, StoreBusy
from durably.redact import redact, redact_url
from durably.store.private import open_private
from durably.store.sqlfiles import Migration, migrations

Row = dict[str, Any]
Params = Mapping[str, Any]

_NAME_MARKER = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)
_STATEMENT_END = re.compile(r";\s*(?:\n|$)")

# An arbitrary constant: PostgreSQL advisory locks are keyed by a bigint, and this one only
# serialises concurrent migrations (CREATE TABLE IF NOT EXISTS races on pg_type).
_SCHEMA_LOCK_ID = 0x6475726162_1D
_SQL_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sql")
_META = "durably_idempotency_meta"


def receiving_migrations(dialect: str) -> list[Migration]:
    """The receiving side's own migration sequence (``sql/<dialect>/migrations``)."""
    return migrations(dialect, _SQL_ROOT)


def _too_old(where: str, version: int, latest: int) -> SchemaNotMigrated:
    state = "are missing" if version == 0 else f"are at schema version {version}"
    return SchemaNotMigrated(
        f"the idempotency and outbox tables in {where} {state}; this durably needs version"
        f" {latest}. Run `durably migrate --idempotency --db URL` once (as a role allowed to"
        " create tables), or call durably.idempotency.migrate(url), then start again"
    )


def _check_version(where: str, version: int) -> None:
    latest = len(receiving_migrations_cached())
    if version > latest:
        raise SchemaTooNew(
            f"the idempotency and outbox tables in {where} are at schema version {version},"
            f" newer than this durably knows ({latest}); upgrade durably"
        )
    if version < latest:
        raise _too_old(where, version, latest)


@cache
def receiving_migrations_cached() -> tuple[Migration, ...]:
    """Both dialects number their migrations alike; the SQLite files give the count."""
    return tuple(receiving_migrations("sqlite"))


@cache
def load_queries(dialect: str, filename: str) -> dict[str, str]:
    """Return the named queries of ``sql/<dialect>/<filename>`` as ``{name: sql}``.

    A query starts at a ``-- name: <name>`` line and runs to the next one; comments before
    the first marker describe the file and are dropped.
    """
    text = (
        resources.files("durably.idempotency")
        .joinpath("sql", dialect, filename)
        .read_text(encoding="utf-8")
    )
    parts = _NAME_MARKER.split(text)
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        assert name not in queries, f"duplicate query {name!r} in {dialect}/{filename}"
        queries[name] = body.strip().rstrip(";").strip()
    return queries


def split_statements(script: str) -> list[str]:
    """Split a schema block into single statements (neither driver runs several at once)."""
    return [s.strip() for s in _STATEMENT_END.split(script) if s.strip()]


class Tx:
    """One open transaction: runs named queries on the connection it wraps.

    ``conn`` is the driver's own connection (``sqlite3.Connection`` or
    ``psycopg.Connection``), handed to user code that wants to write in this transaction.
    """

    def __init__(self, conn: Any, queries: Mapping[str, str], dialect: str) -> None:
        self.conn = conn
        self.dialect = dialect
        self._queries = queries

    def execute(self, name: str, params: Params) -> int:
        """Run a named statement and return the number of rows it changed."""
        cur = self.conn.execute(self._queries[name], params)
        return int(cur.rowcount)

    def one(self, name: str, params: Params) -> Row | None:
        """Run a named query and return its first row as a dict, or None."""
        rows = self.all(name, params)
        return rows[0] if rows else None

    def all(self, name: str, params: Params) -> list[Row]:
        """Run a named query and return all its rows as dicts."""
        cur = self.conn.execute(self._queries[name], params)
        if cur.description is None:
            return []
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        """Undo only what happens inside the block when it raises; the transaction goes on."""
        if self.dialect == "postgres":
            with self.conn.transaction():
                yield
            return
        self.conn.execute("SAVEPOINT durably_sp")
        try:
            yield
        except BaseException:
            self.conn.execute("ROLLBACK TO SAVEPOINT durably_sp")
            self.conn.execute("RELEASE SAVEPOINT durably_sp")
            raise
        self.conn.execute("RELEASE SAVEPOINT durably_sp")


class Database(ABC):
    """A connection source for one database URL; subclasses hold the dialect details."""

    dialect: str = ""

    @abstractmethod
    def transaction(self, filename: str) -> AbstractContextManager[Tx]:
        """Open a write transaction whose named queries come from ``filename``."""

    @abstractmethod
    def migrate(self) -> int:
        """Apply the receiving side's pending migrations; return the schema version."""

    @abstractmethod
    def check_schema(self) -> None:
        """Raise SchemaNotMigrated (or SchemaTooNew) unless the tables are current.

        Reads only, so a role limited to rows can open the store and the outbox.
        """

    @abstractmethod
    def close(self) -> None:
        """Close every connection this object opened."""

    def db_time(self) -> float | None:
        """The database server's clock in epoch seconds, or None when the database shares
        this host's clock (SQLite, a file on this host)."""
        return None


class SQLiteDatabase(Database):
    """SQLite through the standard library: WAL, ``synchronous=FULL``, ``BEGIN IMMEDIATE``.

    Each thread gets its own connection (sqlite3 connections are not safe to share while a
    transaction is open). ``BEGIN IMMEDIATE`` takes the write lock at the start, so two
    writers never both read a key as free; a writer that waits longer than the busy timeout
    gets :class:`durably.errors.StoreBusy`.
    """

    dialect = "sqlite"

    def __init__(self, path: str, *, busy_timeout_s: float, synchronous: str) -> None:
        if synchronous.upper() not in ("FULL", "NORMAL", "EXTRA"):
            raise ConfigError(
                f"synchronous={synchronous!r} is not supported; use 'FULL' (the default: every"
                " commit is on disk) or 'NORMAL' (faster; a power cut may lose the last commits)"
            )
        self.path = path
        open_private(path, "idempotency database")  # created 0600: it holds responses
        self._busy_timeout_s = busy_timeout_s
        self._synchronous = synchronous.upper()
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        # Connections a forked child inherited: never used (SQLite forbids carrying one
        # across a fork) and never closed (that could checkpoint away the parent's WAL).
        self._inherited: list[sqlite3.Connection] = []
        # os.fork() waits for transactions in progress: SQLite's file locks live in
        # process-wide state, so a child forked inside one could never write.
        self._fork_gate = ForkGate()
        reset_after_fork(self)

    def _after_fork_in_child(self) -> None:
        """Each thread of the child opens connections of its own on first use."""
        self._inherited += self._all
        self._all = []
        self._local = threading.local()
        self._lock = threading.Lock()

    def _connection(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            # isolation_level=None: the module must not open transactions behind our back;
            # every transaction here is an explicit BEGIN IMMEDIATE.
            conn = sqlite3.connect(
                self.path,
                timeout=self._busy_timeout_s,
                isolation_level=None,
                check_same_thread=False,
            )
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={self._synchronous}")
            conn.execute(f"PRAGMA busy_timeout={int(self._busy_timeout_s * 1000)}")
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        return conn

    @contextmanager
    def transaction(self, filename: str) -> Iterator[Tx]:
        """Open a ``BEGIN IMMEDIATE`` transaction; commit on success, roll back on error."""
        with self._fork_gate.inside():
            conn = self._connection()
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                raise self._busy(exc) from exc
            try:
                yield Tx(conn, load_queries("sqlite", filename), "sqlite")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            try:
                conn.execute("COMMIT")
            except sqlite3.OperationalError as exc:
                conn.execute("ROLLBACK")
                raise self._busy(exc) from exc

    def _busy(self, exc: sqlite3.OperationalError) -> Exception:
        if "locked" in str(exc) or "busy" in str(exc):
            return StoreBusy(
                f"SQLite database {self.path!r} stayed locked for more than the busy timeout"
                f" ({self._busy_timeout_s:g} s), so the request was not recorded; retry it,"
                " raise busy_timeout_s, or keep transactions that run user code short"
            )
        return exc

    def migrate(self) -> int:
        """Migrate in one ``BEGIN IMMEDIATE`` transaction (safe for concurrent starts)."""
        with self.transaction("idempotency.sql") as tx:
            exists = tx.conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (_META,)
            ).fetchone()
            current = _version_of(tx.conn) if exists else 0
            return _apply(tx.conn, "sqlite", current, self.path)

    def check_schema(self) -> None:
        """Read the schema version on a connection of this thread; no write lock."""
        try:
            version = _version_of(self._connection())
        except sqlite3.OperationalError as exc:
            if "no such table" not in str(exc):
                raise self._busy(exc) from exc
            version = 0
        _check_version(self.path, version)

    def close(self) -> None:
        """Close the connections of every thread that used this database."""
        with self._lock:
            conns, self._all = self._all, []
        for conn in conns:
            conn.close()
        self._local = threading.local()


class PostgresDatabase(Database):
    """PostgreSQL through psycopg 3 and a psycopg_pool connection pool."""

    dialect = "postgres"

    def __init__(self, url: str, *, pool_size: int) -> None:
        try:
            import psycopg_pool  # noqa: F401  (checked here for a clear error)
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ConfigError(
                "a postgresql:// URL needs psycopg 3 and psycopg_pool; install them with"
                " pip install 'durably[postgres]'"
            ) from exc
        if pool_size < 1:
            raise ConfigError(f"pool_size must be at least 1, got {pool_size}")
        from psycopg import ProgrammingError
        from psycopg.conninfo import conninfo_to_dict

        try:
            # Parsed here, not first in the pool's thread: that one logs libpq's message,
            # which quotes the bad part of the URL (a password included), and keeps trying.
            conninfo_to_dict(url)
        except ProgrammingError as exc:
            raise ConfigError(
                f"bad PostgreSQL URL {redact_url(url)!r}: {redact(str(exc).strip(), url=url)};"
                " write postgresql://user@host:port/dbname, with the password percent-encoded"
                " after the user name"
            ) from None
        from durably.store.postgres import _describe

        self.url = url
        self.where = _describe(url)  # for messages: never the password
        self._pool_size = pool_size
        self._pool = self._new_pool()
        self._pid = os.getpid()
        self._fork_lock = threading.Lock()
        # Pools a forked child inherited: never used or closed there (closing sends the
        # server a Terminate for each connection, ending the parent's sessions).
        self._inherited: list[object] = []
        reset_after_fork(self)

    def _new_pool(self) -> Any:
        from psycopg_pool import ConnectionPool

        return ConnectionPool(
            self.url,
            min_size=1,
            max_size=self._pool_size,
            kwargs={"autocommit": True},
            open=True,
        )

    def _after_fork_in_child(self) -> None:
        """A fresh lock; :meth:`_live_pool` swaps the pool on first use in the child."""
        self._fork_lock = threading.Lock()

    def _live_pool(self) -> Any:
        """This process's pool: a forked child opens its own on first use."""
        if self._pid != os.getpid():
            with self._fork_lock:
                if self._pid != os.getpid():
                    self._inherited.append(self._pool)
                    self._pool = self._new_pool()
                    self._pid = os.getpid()
        return self._pool

    @contextmanager
    def transaction(self, filename: str) -> Iterator[Tx]:
        """Open a READ COMMITTED transaction; commit on success, roll back on error."""
        with self._live_pool().connection() as conn, conn.transaction():
            yield Tx(conn, load_queries("postgres", filename), "postgres")

    def migrate(self) -> int:
        """Migrate under an advisory lock, so concurrent migrations do not race."""
        with self.transaction("idempotency.sql") as tx:
            tx.conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK_ID,))
            exists = tx.conn.execute("SELECT to_regclass(%s)", (_META,)).fetchone()[0]
            current = _version_of(tx.conn) if exists is not None else 0
            return _apply(tx.conn, "postgres", current, self.where)

    def check_schema(self) -> None:
        """Read the schema version (no lock, no DDL)."""
        with self.transaction("idempotency.sql") as tx:
            exists = tx.conn.execute("SELECT to_regclass(%s)", (_META,)).fetchone()[0]
            version = _version_of(tx.conn) if exists is not None else 0
        _check_version(self.where, version)

    def db_time(self) -> float | None:
        """The server's ``clock_timestamp()`` in epoch seconds."""
        with self.transaction("idempotency.sql") as tx:
            row = tx.one("db_time", {})
        assert row is not None, "SELECT without FROM returns one row"
        return float(row["now"])

    def close(self) -> None:
        """Close this process's pool and its connections (never a parent's)."""
        if self._pid == os.getpid():
            self._pool.close()


def _version_of(conn: Any) -> int:
    """The schema version stored in the meta table (which must exist)."""
    row = conn.execute(f"SELECT value FROM {_META} WHERE key = 'schema_version'").fetchone()
    return int(row[0]) if row is not None else 0


def _apply(conn: Any, dialect: str, current: int, where: str) -> int:
    """Run the migrations after ``current`` on ``conn``'s open transaction."""
    steps = receiving_migrations(dialect)
    if current > len(steps):
        _check_version(where, current)  # raises SchemaTooNew
    for mig in steps[current:]:
        for statement in split_statements(_strip_comments(mig.sql)):
            conn.execute(statement)
        conn.execute(
            f"INSERT INTO {_META} (key, value) VALUES ('schema_version', '{mig.version}')"
            " ON CONFLICT (key) DO UPDATE SET value = excluded.value"
        )
    return max(current, len(steps))


def _strip_comments(script: str) -> str:
    return "\n".join(line for line in script.splitlines() if not line.lstrip().startswith("--"))


# The backend options of the receiving side, by backend: a caller passes each as None
# when it was not given, so an option meant for the other backend is refused, not ignored.
SQLITE_OPTIONS: Final = ("busy_timeout_s", "synchronous")
POSTGRES_OPTIONS: Final = ("pool_size",)


def open_database(
    url: str,
    *,
    busy_timeout_s: float | None = None,
    synchronous: str | None = None,
    pool_size: int | None = None,
    default_pool_size: int = 10,
    owner: str = "IdempotencyStore",
) -> Database:
    """Open ``sqlite:///path`` or ``postgresql://...``; anything else is a ConfigError.

    ``busy_timeout_s`` (default 5 s) and ``synchronous`` (default ``FULL``) are SQLite's,
    ``pool_size`` (default ``default_pool_size``) PostgreSQL's; one given for the other
    backend is a ConfigError naming ``owner``'s options for this one: an ignored option is
    a setting its caller believes is in force.
    """
    if not isinstance(url, str) or not url:
        raise ConfigError(
            f"database URL must be a non-empty string such as 'sqlite:///idempotency.db' or"
            f" 'postgresql://user@host/db', got {redact(repr(url))}"
        )
    scheme = urlsplit(url).scheme.lower()
    if scheme == "sqlite":
        path = url[len("sqlite:///") :] if url.lower().startswith("sqlite:///") else ""
        if "?" in path or "#" in path:
            # Ignored, an option written as ?synchronous=NORMAL would not be in force.
            raise ConfigError(
                f"{redact_url(url)!r}: a SQLite URL takes no ?options or #fragment; pass"
                f" options as keywords ({owner}(url, busy_timeout_s=10, synchronous='NORMAL'))"
            )
        if not path or path == ":memory:":
            raise ConfigError(
                f"{redact_url(url)!r} does not name a database file; use"
                " 'sqlite:///relative/path.db' or 'sqlite:////absolute/path.db' (in-memory"
                " databases cannot be shared between"
                " threads and processes, which is the point of an idempotency store)"
            )
        _refuse(owner, "SQLite", {"pool_size": pool_size}, SQLITE_OPTIONS)
        return SQLiteDatabase(
            path,
            busy_timeout_s=5.0 if busy_timeout_s is None else busy_timeout_s,
            synchronous="FULL" if synchronous is None else synchronous,
        )
    if scheme in ("postgresql", "postgres"):
        given = {"busy_timeout_s": busy_timeout_s, "synchronous": synchronous}
        _refuse(owner, "PostgreSQL", given, POSTGRES_OPTIONS)
        return PostgresDatabase(
            url, pool_size=default_pool_size if pool_size is None else pool_size
        )
    raise ConfigError(
        f"unsupported database URL {redact_url(url)!r}; use 'sqlite:///path.db' or"
        " 'postgresql://user@host/db'"
    )


def _refuse(owner: str, kind: str, others: dict[str, Any], takes: tuple[str, ...]) -> None:
    """ConfigError when an option of the other backend was given (is not None)."""
    given = [name for name, value in others.items() if value is not None]
    if given:
        raise ConfigError(
            f"{owner} on {kind} does not take {', '.join(given)} (an option of the other"
            f" database); on {kind} it takes {', '.join(takes)}. Leave the option out, or"
            " point the URL at the database it is meant for"
        )
