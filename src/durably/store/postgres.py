"""The fleet journal: PostgreSQL through psycopg 3 and a psycopg_pool connection pool.

Semantics are those of :class:`durably.store.sqlite.SQLiteStore` (one contract suite checks
both); only the mechanics differ:

- Every operation is one transaction on one pooled connection (autocommit connections, so
  a single-statement operation is one round trip and an implicit transaction). A
  connection that dies under an operation (``pg_terminate_backend``, a server restart, a
  network cut) is dropped and the operation is retried once on a fresh connection. That
  retry is safe even when the first attempt's commit outcome is unknown: claims and
  status updates are re-applied to the same end state, and an append whose records are
  already stored *identically* counts as done.
- A claim locks the run row (``SELECT ... FOR UPDATE``); an append takes ``FOR KEY SHARE``
  on the same row inside its fenced upsert, so a claim waits for an in-flight append to
  commit and the append that waited is refused with the raised token. Fencing is thus as
  strict as SQLite's single writer, without a table lock.
- Workers claim with ``FOR UPDATE SKIP LOCKED`` (many claim at once, each a different
  run) and sleep in ``LISTEN``; creating, releasing, finishing and requeueing a run
  ``NOTIFY`` them, inside the same statement or transaction, so a wake-up never precedes
  the change it announces.
- Times come from the injected clock as float seconds (DOUBLE PRECISION columns), never
  the server's ``now()``, so workers and tests on a fake clock agree.
- Tables live in the first schema of the connection's ``search_path`` (put
  ``options=-csearch_path%3Dmyschema`` in the URL to choose one). Migrations run under a
  per-schema advisory lock, so many workers starting at once migrate exactly once.

psycopg is imported here only; :func:`durably.store.open.open_store` imports this module
only for ``postgresql://`` URLs, so ``import durably`` never loads it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import psycopg
from psycopg import Connection, sql
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool, PoolClosed, PoolTimeout

from .._fork import reset_after_fork
from ..clock import Clock
from ..errors import (
    ConfigError,
    LeaseLost,
    NotADurablyDatabase,
    SchemaTooNew,
    StoreBusy,
    StoreDiskFull,
    StoreError,
    StoreUnavailable,
)
from ..events import NewEvent
from ..history import StepRecord
from .approvals import Approvals
from .base import Owner, Served, served_pairs
from .durability import EFFECTS, POWER, PROCESS, check_mode
from .events import Events
from .fleet import Fleet
from .generations import Generations
from .groupcommit import Append, GroupCommit
from .leases import Leases
from .pg import (
    _EVENTS_VALUES_MAX,
    _close,
    _first_line,
    _has_input,
    _record_params,
    _refused_for_good,
)
from .pg import (
    _describe as _describe,
)
from .pg import (
    _events_sql as _events_sql,
)
from .pg import (
    classify as classify,
)
from .retention import Retention
from .runs import Runs
from .signals import Signals
from .spend import SpendLedger
from .sqlfiles import load_queries, migrations, pending
from .streamwriter import StreamTier
from .tx import Tx

APP_NAME = "durably"
_Q = load_queries("postgres")
# The queries that wake waiting workers themselves (they take the schema's channel).
_NOTIFYING = frozenset(name for name, text in _Q.items() if "%(channel)s" in text)
# One retry: enough to step over one dead pooled connection, few enough that a server
# that is really gone surfaces quickly as a StoreError.
_ATTEMPTS = 2

T = TypeVar("T")
Conn = Connection[tuple[Any, ...]]


class PostgresStore(
    Runs,
    Leases,
    Generations,
    Signals,
    Approvals,
    SpendLedger,
    Events,
    Fleet,
    Retention,
    StreamTier,
):
    """A :class:`~durably.store.base.Store` on a PostgreSQL database.

    The semantics are the role modules' (:mod:`durably.store.tx`); this class is the
    backend: the pool, the fork gate, the retry after a lost connection, error
    translation, LISTEN/NOTIFY, the owner-lock session, and the step path's own writes.

    ``pool_min``/``pool_max`` bound the connection pool (one connection per concurrently
    active thread is enough); ``connect_timeout_s`` bounds both opening a connection and
    waiting for a free one. Any other option is refused (``durably.store.open``), the
    SQLite store's ``synchronous`` and ``busy_timeout_s`` too: an option ignored is a
    setting its caller believes is in force.
    """

    _driver_errors = (psycopg.Error,)  # a batch member raising one fails the transaction

    def __init__(
        self,
        url: str,
        clock: Clock,
        *,
        pool_min: int = 1,
        pool_max: int = 10,
        connect_timeout_s: float = 5,
        durability: str | None = None,
    ) -> None:
        self.durability = check_mode(durability) or POWER
        # Effects mode: the pooled connections whose session has synchronous_commit off
        # now (a pure step's append switched it; the next other use switches it back).
        self._async_sessions: weakref.WeakSet[Conn] = weakref.WeakSet()
        self._group = GroupCommit(self._append_one, self._append_many)
        if not 0 <= pool_min <= pool_max or pool_max < 1:
            raise ConfigError(
                f"pool_min={pool_min}, pool_max={pool_max}: need 0 <= pool_min <= pool_max"
                " and pool_max >= 1"
            )
        if connect_timeout_s <= 0:
            raise ConfigError(f"connect_timeout_s={connect_timeout_s}: must be > 0")
        self.url = url
        self.clock = clock
        self.connect_timeout_s = connect_timeout_s
        self.where = _describe(url)
        self.schema_version = 0
        self.schema = ""
        conn_kwargs: dict[str, Any] = {
            "autocommit": True,
            # libpq wants whole seconds; at least 1 (0 would mean "wait forever").
            "connect_timeout": max(1, round(connect_timeout_s)),
        }
        if "application_name" not in conninfo_to_dict(url):
            # Lets an operator find durably's sessions in pg_stat_activity.
            conn_kwargs["application_name"] = "durably"
        self._conn_kwargs = conn_kwargs
        self._migrate_on_fresh_connection(conn_kwargs)
        # NOTIFY is database-wide; one channel per schema keeps journals that share a
        # database from waking each other (a channel name is at most 63 bytes).
        self._channel = "durably_" + hashlib.sha256(self.schema.encode()).hexdigest()[:32]
        self._listen_conn: Conn | None = None
        self._listen_lock = threading.Lock()
        # Followers of run event streams: a channel and a listening connection of their own.
        self._events_channel = "durably_ev_" + self._channel[len("durably_") :]
        self._events_listener: Conn | None = None
        self._events_lock = threading.Lock()
        self._pool_min, self._pool_max = pool_min, pool_max
        self._inherited: list[object] = []
        self._owner_conn: Conn | None = None  # holds this process's owner lock
        self._owner_held = ""
        self._owner_lock = threading.Lock()
        self._pid = os.getpid()
        self._fork_lock = threading.Lock()
        reset_after_fork(self)
        self._pool: ConnectionPool[Conn] = self._new_pool()
        try:
            self._pool.open(wait=pool_min > 0, timeout=connect_timeout_s)
        except PoolTimeout as exc:
            self._pool.close()
            raise StoreError(
                f"cannot open {pool_min} connection(s) to {self.where} within"
                f" {connect_timeout_s:g} s; check that the server accepts that many"
                " connections, or lower pool_min"
            ) from exc

    # -- connection set-up ---------------------------------------------------------------

    def _migrate_on_fresh_connection(self, conn_kwargs: dict[str, Any]) -> None:
        """Connect once outside the pool, so a bad URL or a down server gets libpq's own
        reason in the error instead of a bare pool timeout, and migrate."""
        try:
            conn: Conn = psycopg.connect(self.url, **conn_kwargs)
        except psycopg.Error as exc:
            # Refused or unreachable may pass (a server restarting): callers may retry. A
            # server that answered and said no (unknown role or database) will say no again.
            cls = StoreError if _refused_for_good(exc) else StoreUnavailable
            raise cls(
                f"cannot connect to {self.where}: {_first_line(exc, self.url)}. Check that the"
                " server is running and reachable, and that the URL (--db / DURABLY_URL) names the"
                " right host, port, user, password and database"
            ) from exc
        try:
            with conn:
                self._migrate(conn)
        except psycopg.Error as exc:
            raise self._translate(exc) from exc

    def _migrate(self, conn: Conn) -> None:
        """Create or upgrade the schema; refuse schemas that hold someone else's tables."""
        steps = migrations("postgres")
        with conn.transaction():
            conn.execute(_Q["meta_lock"])
            schema = _scalar(conn, "current_schema", {})
            if schema is None:
                raise StoreError(
                    f"{self.where}: the connection's search_path names no existing schema,"
                    " so durably has nowhere to create its tables; create the schema"
                    " (CREATE SCHEMA name) or fix options=-csearch_path in the URL"
                )
            self.schema = str(schema)
            self.where = f"{self.where} (schema {schema})"
            tables = {r[0] for r in conn.execute(_Q["own_tables"])}
            current = 0
            if "durably_meta" in tables:
                if _scalar(conn, "get_meta", {"key": "app"}) != APP_NAME:
                    raise NotADurablyDatabase(
                        f"{self.where}: the table durably_meta is not durably's; point durably"
                        " at another schema or database. Nothing was changed."
                    )
                current = int(_scalar(conn, "get_meta", {"key": "schema_version"}) or 0)
            elif tables:
                raise NotADurablyDatabase(
                    f"{self.where} already has tables named {sorted(tables)} that durably"
                    " did not create; give durably a schema of its own (add"
                    " options=-csearch_path%3Ddurably to the URL after CREATE SCHEMA durably)"
                    " or another database. Nothing was changed."
                )
            if current > steps[-1].version:
                raise SchemaTooNew(
                    f"{self.where} has journal schema {current}, newer than this durably"
                    f" knows ({steps[-1].version}); upgrade durably"
                )
            for mig in pending(steps, current):
                # No parameters: psycopg sends the file as one multi-statement query.
                conn.execute(mig.sql.encode())
                conn.execute(_Q["set_meta"], {"key": "schema_version", "value": str(mig.version)})
            if current == 0:
                conn.execute(_Q["set_meta"], {"key": "app", "value": APP_NAME})
        self.schema_version = max(current, steps[-1].version)

    def _new_pool(self) -> ConnectionPool[Conn]:
        return ConnectionPool(
            self.url,
            min_size=self._pool_min,
            max_size=self._pool_max,
            kwargs=self._conn_kwargs,
            timeout=self.connect_timeout_s,
            name="durably",
            open=False,
            configure=self._configure if self.durability == PROCESS else None,
        )

    def _configure(self, conn: Conn) -> None:
        """Process mode: no commit of this session waits for its WAL flush (the server
        still writes it out within a few hundred ms; a crash of this process loses
        nothing acknowledged, a crash of the server or its host may lose the last
        commits, never consistency)."""
        conn.execute("SET synchronous_commit = off")

    def _commit_level(self, conn: Conn, durable: bool) -> None:
        """Effects mode: a pure step's append commits with ``synchronous_commit`` off; any
        other use of the connection puts the session's setting back first (a synchronous
        commit waits for the WAL up to it, so it carries every commit before it too).
        Switches only when the session is not already so: a run of pure steps costs one
        extra round trip at its start, not one per step."""
        if self.durability != EFFECTS:
            return
        if durable and conn in self._async_sessions:
            conn.execute("RESET synchronous_commit")
            self._async_sessions.discard(conn)
        elif not durable and conn not in self._async_sessions:
            conn.execute("SET synchronous_commit = off")
            self._async_sessions.add(conn)

    def _after_fork_in_child(self) -> None:
        """Fresh locks in a forked child: a parent thread may have held them at the fork.
        The pool and listener are swapped by :meth:`_check_fork` on first use."""
        self._listen_lock = threading.Lock()
        self._events_lock = threading.Lock()
        self._owner_lock = threading.Lock()
        self._fork_lock = threading.Lock()
        self._group.reset()

    def _check_fork(self) -> None:
        """A forked child gets a pool and listener of its own. The inherited ones are kept
        referenced and never used or closed: closing a connection sends the server a
        Terminate, which would end the parent's session."""
        if self._pid == os.getpid():
            return
        with self._fork_lock:
            if self._pid == os.getpid():
                return  # another thread of the child swapped them meanwhile
            self._inherited += [
                self._pool,
                self._listen_conn,
                self._events_listener,
                self._owner_conn,
            ]
            self._listen_conn = self._events_listener = None
            self._owner_conn, self._owner_held = None, ""  # the child is another owner
            self._pool = self._new_pool()
            self._pool.open(wait=False)
            self._pid = os.getpid()

    def _call(self, op: Callable[[Conn, bool], T], durable: bool = True) -> T:
        """Run ``op(conn, retried)`` on a pooled connection, retrying once on a lost one.

        ``op`` must be one transaction (or one autocommit statement), so a retry never
        sees half of a previous attempt; ``retried`` tells it that the first attempt's
        outcome is unknown. ``durable`` False (effects mode: a pure step's append) lets
        its commit return before its WAL flush.
        """
        self._check_fork()
        for attempt in range(_ATTEMPTS):
            try:
                with self._pool.connection() as conn:
                    self._commit_level(conn, durable)
                    return op(conn, attempt > 0)
            except PoolTimeout as exc:
                raise StoreBusy(
                    f"no connection to {self.where} became free within"
                    f" {self.connect_timeout_s:g} s: the server is down or unreachable, or"
                    f" all {self._pool.max_size} pooled connections are busy. Nothing was"
                    " recorded by this call; retry, check the server, or raise pool_max"
                ) from exc
            except PoolClosed as exc:
                raise StoreError(f"the store for {self.where} is closed") from exc
            except psycopg.OperationalError as exc:
                if attempt + 1 < _ATTEMPTS:
                    # Other idle connections likely died with this one (a server restart
                    # kills them all): drop them now rather than fail on each in turn.
                    self._pool.check()
                    continue
                raise self._translate(exc) from exc
            except psycopg.Error as exc:
                raise self._translate(exc) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    # -- the transaction protocol (durably.store.tx) --------------------------------------

    @property
    def _where(self) -> str:
        return self.where

    def _writing(self, op: Callable[[Tx], T], atomic: bool = True, durable: bool = True) -> T:
        """``op`` in one transaction on a pooled connection, run again once on a fresh
        connection when the first died (``tx.retried``); ``atomic=False``: in autocommit,
        one round trip per statement; ``durable`` False (effects mode): its commit does
        not wait for the WAL flush."""

        def run(conn: Conn, retried: bool) -> T:
            tx = _PgTx(conn, self, retried)
            if not atomic:
                return op(tx)
            with conn.transaction():
                return op(tx)

        return self._call(run, durable)

    def _reading(self, op: Callable[[Tx], T], snapshot: bool = False) -> T:
        """``op``'s reads in autocommit (``snapshot``: the op orders its reads instead)."""
        return self._call(lambda conn, retried: op(_PgTx(conn, self, retried)))

    def _translate(self, exc: psycopg.Error) -> StoreError:
        """The driver's error as a durably error, transient or permanent (see
        :func:`classify`)."""
        kind = classify(exc)
        if kind is StoreDiskFull:
            return StoreDiskFull(
                f"{self.where}: the server's disk is full ({_first_line(exc)}); nothing"
                " recorded was lost. Free space on the database server, then resume the run"
            )
        if kind is StoreUnavailable:
            return StoreUnavailable(
                f"lost the connection to {self.where}, or the server aborted the"
                f" transaction ({_first_line(exc)}), and the retry failed too; check the"
                " server. Everything committed before is safe"
            )
        return StoreError(f"{self.where}: {_first_line(exc)}")

    # -- leases and parking: the dialect's hooks and waits ---------------------------------

    def _served_params(self, served: Served) -> dict[str, Any]:
        """``served`` as two parallel arrays, workflow names and versions."""
        pairs = served_pairs(served)
        return {
            "workflows": [name for name, _ in pairs],
            "versions": [version for _, version in pairs],
        }

    def _open_queues(
        self, tx: Tx, queues: Sequence[str], limits: dict[str, int], now: float, dead: list[str]
    ) -> list[str]:
        """The queues with a free slot, holding each limited queue's lock until commit;
        runs of the ``dead`` owners hold no slot."""
        limited = sorted(q for q in set(queues) if q in limits)
        for q in limited:  # sorted, so two workers never wait on each other in a cycle
            tx.q("lock_queue", queue=q)
        busy: dict[str, int] = {}
        if limited:
            rows = tx.q("running_per_queue", now=now, queues=limited, dead=dead).fetchall()
            busy = {q: int(n) for q, n in rows}
        return [q for q in queues if q not in limits or limits[q] > busy.get(q, 0)]

    def _lock_for_park(self, tx: Tx, run_id: str, token: int) -> None:
        """The row lock first, in a statement of its own: a signal, decision or cancel
        that held the row commits first, and park_run's fresh snapshot sees it (READ
        COMMITTED takes a snapshot per statement)."""
        if tx.scalar("lock_token", run_id=run_id) != token:
            raise LeaseLost(run_id, token)

    def wait_for_work(self, timeout_s: float) -> bool:
        """Block until a run may have become runnable (a NOTIFY: True) or ``timeout_s``
        passed (False).

        A wake-up is a hint, never a promise: the caller claims and may find nothing. When
        the listening connection fails, this waits out the time and reconnects next call.
        """
        self._check_fork()
        deadline = time.monotonic() + timeout_s
        if not self._listen_lock.acquire(timeout=max(0.0, timeout_s)):
            return False  # another thread is listening; it has waited the time for us
        try:
            conn = self._listener()
            if conn is not None:
                left = max(0.0, deadline - time.monotonic())
                return any(True for _note in conn.notifies(timeout=left, stop_after=1))
        except psycopg.Error:
            self._close_listener()
        finally:
            self._listen_lock.release()
        time.sleep(max(0.0, deadline - time.monotonic()))
        return False

    def _listener(self) -> Conn | None:
        """The connection LISTENing on this schema's channel, opened on first use."""
        self._listen_conn = self._listen(self._listen_conn, self._channel)
        return self._listen_conn

    def _listen(self, conn: Conn | None, channel: str) -> Conn | None:
        """``conn`` while it is open, else a new connection LISTENing on ``channel`` (None
        when none can be opened now: the caller waits out its time and tries again)."""
        if conn is not None and not conn.closed:
            return conn
        try:
            conn = psycopg.connect(self.url, **self._conn_kwargs)
        except psycopg.Error:
            return None
        conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        return conn

    def _close_listener(self) -> None:
        conn, self._listen_conn = self._listen_conn, None
        if conn is not None:
            conn.close()

    # -- the step path's tuned append ---------------------------------------------------

    def _append_quick(
        self,
        run_id: str,
        token: int,
        records: Sequence[StepRecord],
        events: Sequence[NewEvent],
        durable: bool = True,
    ) -> bool | None:
        """The step path in one autocommit round trip: a step's record alone
        (append_record), or with its events (append_with_events, which writes them only
        when the record was written). A record with blobs, many records or events alone
        take the transaction (its blobs go first); so does a refusal, which this statement
        leaves unwritten for that transaction to explain (None)."""
        if len(records) != 1 or records[0].blobs:
            return None
        query, params = self._quick_statement(run_id, token, records[0], events)

        def op(conn: Conn, _retried: bool) -> bool | None:
            # A retry after an unknown commit runs it again: the record then stored is
            # refused (or, an intent, taken again as it is) and the transaction decides.
            return _quick_cancel(conn.execute(query, params).fetchone(), bool(events))

        return self._call(op, durable)

    def _quick_statement(
        self, run_id: str, token: int, rec: StepRecord, events: Sequence[NewEvent]
    ) -> tuple[str, dict[str, Any]]:
        """The one statement of :meth:`_append_quick`: ``rec`` alone (append_record) or
        with ``events`` (append_with_events), and its parameters."""
        params = _record_params(run_id, token, rec)
        if not events:
            return _Q["append_record"], params
        params.update(self._event_params(run_id, events))
        return _events_sql("append_with_events", len(events)), params

    def _append_many(self, items: Sequence[Append]) -> None:
        """A batch of step appends (one record each, no blobs: the step path) pipelined:
        each append's one statement of :meth:`_append_quick`, all sent in one
        transaction without waiting for each other's results (psycopg's pipeline mode),
        so the batch costs one round trip and one commit instead of four round trips an
        append. Should any be refused (a stale token, a record stored already) or fail,
        the whole transaction is rolled back and the batch is written by the written-once
        path, a savepoint per append, which explains each refusal alone."""
        if not (
            _PIPELINE
            and all(len(i.records) == 1 and not i.records[0].blobs for i in items)
            and self._pipelined(sorted(items, key=lambda i: i.run_id))
        ):
            super()._append_many(items)

    def _pipelined(self, ordered: Sequence[Append]) -> bool:
        """Write ``ordered`` (see :meth:`_append_many`); False when it wrote nothing and
        the savepoint path must."""
        try:
            calls = [
                (*self._quick_statement(i.run_id, i.token, i.records[0], i.events), i)
                for i in ordered
            ]
        except Exception:
            return False  # a record that fails its check: its own error, said alone

        def op(conn: Conn, _retried: bool) -> list[bool]:
            with conn.transaction():
                with conn.pipeline():
                    cursors = [conn.execute(query, params) for query, params, _ in calls]
                cancels = [
                    _quick_cancel(cur.fetchone(), bool(item.events))
                    for cur, (_, _, item) in zip(cursors, calls, strict=True)
                ]
                if any(c is None for c in cancels):
                    raise _Refused  # rolls the transaction back: nothing written
            return [bool(c) for c in cancels]

        try:
            cancels = self._call(op, durable=any(i.durable for i in ordered))
        except _Refused:
            return False
        except StoreError as exc:
            if exc.transient:
                raise  # the transaction failed: every caller's error, as in one alone
            return False  # a value the server refused: the savepoint path names its append
        except Exception:
            # A value the driver cannot send (a lone surrogate: UnicodeEncodeError), raised
            # before the server saw it and rolled back with the transaction: the savepoint
            # path makes it its append's own error, as when it writes alone.
            return False
        for item, cancel in zip(ordered, cancels, strict=True):
            item.result, item.error = cancel, None
        return True

    # -- the event stream -----------------------------------------------------------------

    def _write_events(self, conn: Conn, run_id: str, events: Sequence[NewEvent]) -> None:
        """Number and insert ``events`` inside the open transaction (see write_events)."""
        if events:
            params = self._event_params(run_id, events)
            conn.execute(_events_sql("write_events", len(events)), params)

    def _event_params(self, run_id: str, events: Sequence[NewEvent]) -> dict[str, Any]:
        """The parameters of write_events (and append_with_events) for ``events``, as
        :func:`_events_sql` names them for their number."""
        params: dict[str, Any] = {"run_id": run_id, "events_channel": self._events_channel}
        if len(events) > _EVENTS_VALUES_MAX:
            params["kinds"] = [e.kind for e in events]
            params["positions"] = [e.position for e in events]
            params["datas"] = [e.data for e in events]
            params["ats"] = [e.at for e in events]
            params["dedupes"] = [e.dedupe for e in events]
            return params
        for i, e in enumerate(events):
            params[f"k{i}"] = e.kind
            params[f"p{i}"] = e.position
            params[f"d{i}"] = e.data
            params[f"a{i}"] = e.at
            params[f"x{i}"] = e.dedupe
        return params

    def wait_for_events(self, run_id: str, timeout_s: float) -> None:
        """Block until the run's events may have grown (a NOTIFY naming it) or
        ``timeout_s`` passed. Followers listen on a connection of their own, apart from
        the workers' wake-ups: neither must swallow the other's notifications."""
        self._check_fork()
        deadline = time.monotonic() + timeout_s
        if not self._events_lock.acquire(timeout=max(0.0, timeout_s)):
            return  # another thread is listening; it has waited the time for us
        try:
            conn = self._events_listener = self._listen(self._events_listener, self._events_channel)
            while conn is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                for note in conn.notifies(timeout=left, stop_after=1):
                    if note.payload == run_id:
                        return
        except psycopg.Error:
            _close(self._events_listener)
            self._events_listener = None
        finally:
            self._events_lock.release()
        time.sleep(max(0.0, deadline - time.monotonic()))

    # -- the stream writer's own connection (durably.store.streamwriter) -----------------

    _stream_conn: tuple[int, Conn] | None = None

    def _stream_transact(self, op: Callable[[Tx], None]) -> None:
        """``op`` in one transaction on the stream writer's own connection, whose commits
        do not wait for the WAL flush (``synchronous_commit = off``): stream-only events
        are never on the fsync path. Followers are woken by the NOTIFY of write_events."""
        held = self._stream_conn
        if held is None or held[0] != os.getpid() or held[1].closed:
            conn = psycopg.connect(self.url, **self._conn_kwargs)
            conn.execute("SET synchronous_commit = off")
            held = self._stream_conn = (os.getpid(), conn)
        conn = held[1]
        with conn.transaction():
            op(_PgTx(conn, self, False))

    def _stream_close_conn(self) -> None:
        held, self._stream_conn = self._stream_conn, None
        if held is not None and held[0] == os.getpid():  # never one inherited by a fork
            _close(held[1])

    # -- liveness and time -----------------------------------------------------------

    def hold_owner(self, owner: Owner) -> None:
        """Hold ``owner``'s session advisory lock on a connection of its own for as long as
        this process lives; pg_stat_activity names it ``<application_name>-owner`` (by
        default ``durably-owner``)."""
        self._check_fork()
        text = str(owner)
        with self._owner_lock:
            conn = self._owner_conn
            if conn is not None and not conn.closed and self._owner_held == text:
                return
            self._drop_owner_conn()
            kwargs = dict(self._conn_kwargs)
            # Its own name, so that operators (and scripts ending pool sessions) can tell
            # the lock session, whose loss stops every run of this process, from the pool.
            app = kwargs.get("application_name") or conninfo_to_dict(self.url).get(
                "application_name", "durably"
            )
            kwargs["application_name"] = f"{str(app)[:57]}-owner"
            try:
                conn = psycopg.connect(self.url, **kwargs)
                conn.execute(_Q["hold_owner_lock"], {"owner": text})
            except psycopg.Error as exc:
                raise self._translate(exc) from exc
            self._owner_conn, self._owner_held = conn, text

    def owner_lock_lost(self, ping: bool = True) -> bool:
        """True when the owner lock's connection died since :meth:`hold_owner`; the next
        ``hold_owner`` takes the lock again on a new connection."""
        self._check_fork()
        with self._owner_lock:
            conn = self._owner_conn
            if conn is None:
                return False
            # An idle lock session receives nothing unless it ended (the server's FATAL
            # on pg_terminate_backend or shutdown, a reset): without ``ping`` there is no
            # round trip when it is silent, so every claim can afford the check.
            if not ping and not conn.closed and not _has_input(conn):
                return False
            try:
                conn.execute(_Q["ping"])
                return False
            except psycopg.Error:
                self._drop_owner_conn()
                return True

    def _drop_owner_conn(self) -> None:
        conn, self._owner_conn, self._owner_held = self._owner_conn, None, ""
        if conn is not None:
            try:
                conn.close()
            except psycopg.Error:
                pass  # already dead: that is why it is dropped

    def owners_without_lock(self, owners: Sequence[str]) -> set[str]:
        """The owners whose advisory lock nobody holds (see :meth:`hold_owner`)."""
        wanted = sorted(set(owners))

        def op(conn: Conn, _: bool) -> set[str]:
            free = set()
            for owner in wanted:
                with conn.transaction():  # each probe's lock ends with its transaction
                    if _scalar(conn, "owner_lock_free", {"owner": owner}):
                        free.add(owner)
            return free

        return self._call(op) if wanted else set()

    def db_time(self) -> float | None:
        """The server's clock (``clock_timestamp()``), in seconds since the epoch."""
        return float(self._call(lambda c, _: _scalar(c, "db_time", {})))

    def close(self) -> None:
        """Close the pool, the listening connection, and every connection they opened.

        In a forked child that never used the store this closes nothing: everything it
        holds is the parent's, and closing it would end the parent's sessions."""
        if self._pid != os.getpid():
            return
        self._close_stream()
        with self._listen_lock:
            self._close_listener()
        with self._events_lock:
            _close(self._events_listener)
            self._events_listener = None
        with self._owner_lock:
            self._drop_owner_conn()
        self._pool.close()


class _Refused(Exception):
    """A pipelined batch met a refused append: rolled back, written the other way."""


# psycopg's pipeline mode needs libpq 14 or later.
_PIPELINE = psycopg.Pipeline.is_supported()


def _quick_cancel(row: Any, with_events: bool) -> bool | None:
    """The cancel flag of :meth:`PostgresStore._append_quick`'s statement from its row,
    or None when the record was refused (it wrote nothing)."""
    if with_events:
        return None if row is None or row[0] != 1 else bool(row[2])
    return None if row is None else bool(row[0])


class _PgTx:
    """:class:`~durably.store.tx.Tx` on one pooled connection."""

    __slots__ = ("_conn", "_store", "retried")

    def __init__(self, conn: Conn, store: PostgresStore, retried: bool) -> None:
        self._conn = conn
        self._store = store
        self.retried = retried

    def q(self, name: str, /, **params: Any) -> psycopg.Cursor[tuple[Any, ...]]:
        if name in _NOTIFYING:
            params["channel"] = self._store._channel
        return self._conn.execute(_Q[name], params or None)

    def one(self, name: str, /, **params: Any) -> Any:
        return self.q(name, **params).fetchone()

    def scalar(self, name: str, /, **params: Any) -> Any:
        row = self.q(name, **params).fetchone()
        return None if row is None else row[0]

    def many(self, name: str, rows: Sequence[dict[str, Any]], /) -> None:
        with self._conn.cursor() as cur:
            cur.executemany(_Q[name], rows)

    def array(self, values: Sequence[Any]) -> list[Any]:
        return list(values)

    def notify(self) -> None:
        self._conn.execute(_Q["notify_work"], {"channel": self._store._channel})

    def events(self, run_id: str, events: Sequence[NewEvent]) -> None:
        self._store._write_events(self._conn, run_id, events)

    @contextlib.contextmanager
    def savepoint(self) -> Iterator[None]:
        try:
            with self._conn.transaction():  # nested: a savepoint
                yield
        except (psycopg.IntegrityError, psycopg.DataError) as exc:
            # A row refused, or a value that cannot be stored (a NUL in text): this
            # part's error alone (the savepoint leaves the transaction usable).
            raise self._store._translate(exc) from exc


def _scalar(conn: Conn, query: str, params: dict[str, Any]) -> Any:
    row = conn.execute(_Q[query], params).fetchone()
    return None if row is None else row[0]
