"""The embedded journal: one SQLite file, WAL mode, fsync'd commits.

Durability (:mod:`durably.store.durability`): in ``durability="power"`` (the default,
``synchronous=FULL``) every commit fsyncs the WAL, so a recorded step survives power
loss as well as process death. ``"process"`` (``synchronous=NORMAL``) fsyncs only at
checkpoints: a commit survives a process crash (SIGKILL) but the last commits may be
lost on power loss or an OS crash; it is several times faster on slow disks.
``"effects"`` commits pure steps at NORMAL and every other write at FULL. On macOS
``fullfsync`` is set, because plain fsync there stops at the drive's cache. Writers take
the lock up front with ``BEGIN IMMEDIATE`` and wait up to ``busy_timeout_s`` for another
process to finish.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final, TypeVar

from .._fork import ForkGate, reset_after_fork
from ..clock import Clock
from ..errors import (
    ConfigError,
    LeaseLost,
    NotADurablyDatabase,
    SchemaTooNew,
    StoreBusy,
    StoreDiskFull,
    StoreError,
)
from ..events import NewEvent
from ..history import StepRecord
from ..redact import redact_url
from .approvals import Approvals
from .base import Owner, Served, served_json
from .durability import EFFECTS, sqlite_mode
from .events import Events
from .fleet import Fleet
from .generations import Generations
from .groupcommit import Append, GroupCommit
from .history import record_params
from .leases import Leases
from .private import open_private
from .retention import Retention
from .runs import Runs
from .signals import Signals
from .spend import SpendLedger
from .sqlfiles import latest_version, load_queries, migrations, pending
from .streamwriter import StreamTier
from .tx import Tx

APP_NAME = "durably"
OPEN_RETRY_S = 30.0  # how long opening retries a busy journal (another process migrating)
# SQLite's primary result codes (the low byte of an extended code).
_BUSY, _LOCKED, _IOERR, _CORRUPT, _FULL, _CANTOPEN, _NOTADB = 5, 6, 10, 11, 13, 14, 26
# Free bytes below which an I/O error on the journal's disk is taken for a full disk.
_DISK_NEARLY_FULL_BYTES = 1 << 20
_Q = load_queries("sqlite")
T = TypeVar("T")


def sqlite_path(url: str) -> str:
    """The file path of a ``sqlite:///path`` URL (``:memory:`` allowed)."""
    if not url.startswith("sqlite:///"):
        raise ConfigError(
            f"bad SQLite URL {redact_url(url)!r}: write sqlite:///relative/path.db or"
            " sqlite:////absolute/path.db"
        )
    path = url[len("sqlite:///") :]
    if not path:
        raise ConfigError(f"bad SQLite URL {redact_url(url)!r}: it names no file")
    if "?" in path or "#" in path:
        # Read as a file name, an option written as ?synchronous=NORMAL would be ignored
        # (and name another file): options are keywords.
        raise ConfigError(
            f"bad SQLite URL {redact_url(url)!r}: it takes no ?options or #fragment; pass"
            " options as keywords (Engine(url, synchronous='NORMAL', busy_timeout_s=10))"
        )
    return path


class SQLiteStore(
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
    """A :class:`~durably.store.base.Store` on one SQLite database file.

    The semantics are the role modules' (:mod:`durably.store.tx`); this class is the
    backend: the connection and its pragmas, the fork gate, ``BEGIN IMMEDIATE`` write
    transactions, error translation, and the step path's own writes.
    """

    _driver_errors = (sqlite3.Error,)  # a batch member raising one fails the transaction

    def __init__(
        self,
        url: str,
        clock: Clock,
        *,
        synchronous: str | None = None,
        busy_timeout_s: float = 5.0,
        create: bool = True,
        durability: str | None = None,
    ) -> None:
        # The mode's synchronous setting, or a ConfigError for one that contradicts it.
        self.durability, sync = sqlite_mode(durability, synchronous)
        self.url = url
        self.path = sqlite_path(url)
        self.clock = clock
        self.busy_timeout_s = busy_timeout_s
        self._lock = threading.RLock()
        if self.path != ":memory:" and not create and not os.path.exists(self.path):
            raise StoreError(f"no durably database at {self.path}; check --db / DURABLY_URL")
        open_private(self.path)  # a new journal is created 0600: it holds prompts and secrets
        self._synchronous = sync
        self._level = sync  # the connection's synchronous setting now (effects mode moves it)
        self._inherited: list[sqlite3.Connection] = []
        self._group = GroupCommit(self._append_one, self._append_many)
        self._open()

    def _open(self) -> None:
        """Connect and migrate, retrying while another process holds the journal locked
        (many processes opening a fresh journal at once wait for the one migrating)."""
        delay, deadline = 0.02, time.monotonic() + OPEN_RETRY_S
        while True:
            try:
                self._open_once()
                return
            except StoreBusy:
                if time.monotonic() + delay > deadline:
                    raise
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    def _open_once(self) -> None:
        self._conn = self._connect()
        reset_after_fork(self)
        try:
            self._migrate()
        except BaseException as exc:
            self._conn.close()
            if isinstance(exc, sqlite3.DatabaseError):
                raise self._translate(exc) from exc
            raise

    # -- connection set-up ---------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(
                self.path,
                timeout=self.busy_timeout_s,
                isolation_level=None,
                check_same_thread=False,
            )
        except sqlite3.OperationalError as exc:
            if self._disk_full():
                raise self._translate(exc) from exc
            raise StoreError(
                f"cannot open the SQLite database {self.path}: {exc}; check that the folder"
                " exists and is writable"
            ) from exc
        self._pid = os.getpid()
        self._conn = conn
        try:
            self._configure(self._synchronous)
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise self._translate(exc) from exc
        return conn

    def _live(self) -> sqlite3.Connection:
        """This process's connection. A connection must never cross a fork (SQLite's
        rule): a forked child opens its own, and leaves the inherited one alone (not even
        closed) so nothing it does can disturb the parent's."""
        if self._pid != os.getpid():
            self._inherited.append(self._conn)
            self._connect()
        return self._conn

    def _before_fork(self) -> None:
        """Make ``os.fork()`` wait for the store call in progress. SQLite keeps its file
        locks in process-wide state that the child inherits as it is: a child forked inside
        a write transaction could never write (and the lock itself would stay held)."""
        self._lock.acquire()

    def _after_fork_in_parent(self) -> None:
        self._lock.release()

    def _after_fork_in_child(self) -> None:
        """A fresh lock (the old one is the forking thread's, in a process where nothing
        else runs). The connection is swapped by :meth:`_live` on first use."""
        self._lock = threading.RLock()
        self._group.reset()

    def _configure(self, synchronous: str) -> None:
        c = self._conn
        c.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_s * 1000)}")
        mode = c.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if mode.lower() not in ("wal", "memory"):
            raise StoreError(f"{self.path}: could not switch to WAL (journal_mode={mode})")
        c.execute(f"PRAGMA synchronous = {synchronous}")
        self._level = synchronous
        c.execute("PRAGMA foreign_keys = ON")
        if sys.platform == "darwin":
            # macOS fsync stops at the drive's cache; F_FULLFSYNC reaches the medium.
            c.execute("PRAGMA fullfsync = ON")
            c.execute("PRAGMA checkpoint_fullfsync = ON")

    def _schema_is_current(self) -> bool:
        """True when the file is a durably journal at the newest schema, found with reads
        only: opening an up-to-date journal costs no write transaction (no fsync)."""
        c = self._conn
        current = c.execute("PRAGMA user_version").fetchone()[0]
        latest = latest_version("sqlite")
        if current > latest:
            raise SchemaTooNew(
                f"{self.path} has journal schema {current}, newer than this durably knows"
                f" ({latest}); upgrade durably"
            )
        if current != latest or current == 0:
            return False
        try:
            app = c.execute("SELECT value FROM durably_meta WHERE key='app'").fetchone()
        except sqlite3.OperationalError:
            return False  # no durably_meta: the full check below explains what it is
        return app is not None and app[0] == APP_NAME

    def _migrate(self) -> None:
        """Create or upgrade the schema; refuse files that are not durably journals."""
        if self._schema_is_current():
            return
        # The op runs after _writing's _live(), so self._conn is this process's.
        self._writing(lambda tx: self._migrate_in(self._conn))

    def _migrate_in(self, c: sqlite3.Connection) -> None:
        """:meth:`_migrate`'s work, in its write transaction."""
        tables = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if tables and "durably_meta" not in tables:
            raise NotADurablyDatabase(
                f"{self.path} is a SQLite database but not a durably journal (it has"
                f" tables {sorted(tables)[:5]}); point --db / DURABLY_URL at another"
                " file. Nothing in it was changed."
            )
        current = c.execute("PRAGMA user_version").fetchone()[0]
        if tables:
            app = c.execute("SELECT value FROM durably_meta WHERE key='app'").fetchone()
            if app is None or app[0] != APP_NAME:
                raise NotADurablyDatabase(f"{self.path}: durably_meta is not durably's")
        steps = migrations("sqlite")
        if current > steps[-1].version:
            raise SchemaTooNew(
                f"{self.path} has journal schema {current}, newer than this durably"
                f" knows ({steps[-1].version}); upgrade durably"
            )
        for mig in pending(steps, current):
            _exec_script(c, mig.sql)
            c.execute(f"PRAGMA user_version = {mig.version}")
        if not tables:
            c.execute("INSERT INTO durably_meta (key, value) VALUES ('app', ?)", (APP_NAME,))

    def _commit_level(self, c: sqlite3.Connection, durable: bool) -> None:
        """In effects mode, switch the connection to fsync (FULL) the commit of a durable
        write and to leave a pure step's to the next one (NORMAL). A FULL commit fsyncs
        the whole WAL file, so it carries every commit before it to the disk too. Other
        modes never switch. Runs outside a transaction, under the store's lock."""
        if self.durability != EFFECTS:
            return
        level = "FULL" if durable else "NORMAL"
        if level != self._level:
            c.execute(f"PRAGMA synchronous = {level}")
            self._level = level

    # -- the transaction protocol (durably.store.tx) --------------------------------------

    @property
    def _where(self) -> str:
        return self.path

    def _writing(self, op: Callable[[Tx], T], atomic: bool = True, durable: bool = True) -> T:
        """``op`` in one ``BEGIN IMMEDIATE`` transaction: the database's one writer lock,
        held from the start, is every run row's lock (``atomic`` changes nothing here);
        ``durable`` False (effects mode) commits it at NORMAL."""
        # Not a generator-based context manager: every step's write comes here, and one
        # costs it about 2 us. A statement's error inside is a StoreError, like for BEGIN
        # and COMMIT, never the driver's bare exception.
        with self._lock:
            c = self._live()
            try:
                self._commit_level(c, durable)
                c.execute("BEGIN IMMEDIATE")
            except sqlite3.DatabaseError as exc:
                raise self._translate(exc) from exc
            except BaseException:
                _abandon(c)  # an interrupt raised as BEGIN returned: it began
                raise
            try:
                out = op(_SQLiteTx(c, self))
            except sqlite3.DatabaseError as exc:
                with contextlib.suppress(sqlite3.DatabaseError):
                    c.execute("ROLLBACK")
                raise self._translate(exc) from exc
            except BaseException:
                c.execute("ROLLBACK")
                raise
            try:
                c.execute("COMMIT")
            except sqlite3.DatabaseError as exc:
                with contextlib.suppress(sqlite3.DatabaseError):
                    c.execute("ROLLBACK")
                raise self._translate(exc) from exc
            return out

    def _reading(self, op: Callable[[Tx], T], snapshot: bool = False) -> T:
        """``op``'s reads, in autocommit or (``snapshot``) one deferred read transaction."""
        with self._lock:
            try:
                c = self._live()
                if not snapshot:
                    return op(_SQLiteTx(c, self))
                try:
                    c.execute("BEGIN")
                    return op(_SQLiteTx(c, self))
                finally:
                    # Also after an interrupt raised as BEGIN returned (it began).
                    if c.in_transaction:
                        c.execute("COMMIT")
            except sqlite3.DatabaseError as exc:
                raise self._translate(exc) from exc

    def _translate(self, exc: sqlite3.DatabaseError) -> StoreError:
        """The driver's error as a durably error: transient (busy, locked, disk full, an
        I/O error) or permanent (corruption, not a database, a schema problem)."""
        text = str(exc)
        raw = getattr(exc, "sqlite_errorcode", None)
        code = raw & 0xFF if isinstance(raw, int) else None
        if code in (_BUSY, _LOCKED) or (code is None and ("locked" in text or "busy" in text)):
            return StoreBusy(
                f"{self.path} stayed locked by another process for more than"
                f" {self.busy_timeout_s:g} s; nothing recorded was lost. Retry, or raise"
                " busy_timeout_s (Engine(url, busy_timeout_s=...))"
            )
        if code == _FULL or (code in (_IOERR, _CANTOPEN) and self._disk_full()):
            return StoreDiskFull(
                f"{self.path}: the disk is full ({text}), so nothing more can be recorded;"
                " nothing recorded was lost. Free space on its disk (or raise the database's"
                " size limit), then resume the run"
            )
        if (
            code in (_CORRUPT, _NOTADB)
            or "malformed" in text
            or "not a database" in text
            or "decode to UTF-8" in text  # a hand-edited row holding invalid UTF-8
        ):
            return NotADurablyDatabase(
                f"{self.path} is not a SQLite database or is corrupt ({text}); restore it"
                " from a backup or point --db / DURABLY_URL at another file. durably did"
                " not change it."
            )
        err = StoreError(f"{self.path}: {text}")
        err.transient = code == _IOERR  # a flaky disk or file system may recover
        return err

    def _disk_full(self) -> bool:
        """True when the journal's file system has (almost) no space left: SQLite reports
        some writes on a full disk as a plain I/O error."""
        if self.path == ":memory:":
            return False
        try:
            st = os.statvfs(os.path.dirname(os.path.abspath(self.path)))
        except OSError:
            return False
        return st.f_bavail * st.f_frsize < _DISK_NEARLY_FULL_BYTES

    # -- leases and parking: the dialect's hooks and waits ---------------------------------

    def _served_params(self, served: Served) -> dict[str, Any]:
        """``served`` as one JSON object (names to lists of versions) for json_each."""
        return {"served": json.dumps(served_json(served))}

    def _open_queues(
        self, tx: Tx, queues: Sequence[str], limits: dict[str, int], now: float, dead: list[str]
    ) -> list[str]:
        """The queues with a free slot, counted under the one writer lock the claim's
        ``BEGIN IMMEDIATE`` holds; runs of the ``dead`` owners hold no slot."""
        busy = dict(tx.q("running_per_queue", now=now, dead=tx.array(dead)).fetchall())
        return [q for q in queues if limits.get(q, 1 << 30) > busy.get(q, 0)]

    def _lock_for_park(self, tx: Tx, run_id: str, token: int) -> None:
        """Nothing to take: the park's ``BEGIN IMMEDIATE`` has held the one writer lock
        since its start, and park_run itself is fenced on ``token``."""

    def wait_for_work(self, timeout_s: float) -> bool:
        """SQLite has no notifications: workers poll, so this just waits (False)."""
        time.sleep(timeout_s)
        return False

    # -- the step path's tuned append ---------------------------------------------------

    def _append_quick(
        self,
        run_id: str,
        token: int,
        records: Sequence[StepRecord],
        events: Sequence[NewEvent],
        durable: bool = True,
    ) -> bool | None:
        """The common case, one record without blobs (a step's result, with its events):
        alone, the fenced upsert is a single statement, so in autocommit mode it is its
        own atomic transaction (BEGIN and COMMIT around it would only add two round trips
        through the library); with events, the same statements as :meth:`append`'s
        transaction (BEGIN IMMEDIATE, the upsert, the events, COMMIT) written out, without
        its layers (every step's write comes here). None for any other append, or when
        the upsert was refused and wrote nothing (rolled back: the transaction of
        :meth:`append` explains it)."""
        if len(records) != 1 or records[0].blobs:
            return None
        params = record_params(run_id, records[0])
        params["token"] = token
        with self._lock:
            c = self._live()
            if not events:
                try:
                    self._commit_level(c, durable)
                    # fetchall: an unfinished RETURNING statement would keep its write
                    # pending.
                    rows = c.execute(_Q["append_record"], params).fetchall()
                except sqlite3.DatabaseError as exc:
                    raise self._translate(exc) from exc
                return bool(rows[0][0]) if rows else None
            try:
                self._commit_level(c, durable)
                c.execute("BEGIN IMMEDIATE")
            except sqlite3.DatabaseError as exc:
                raise self._translate(exc) from exc
            except BaseException:
                _abandon(c)  # an interrupt raised as BEGIN returned: it began
                raise
            try:
                rows = c.execute(_Q["append_record"], params).fetchall()
                # Refused (nothing written: the transaction path explains it), or an event
                # stored already (skipped: the transaction path numbers the others).
                if not rows or not self._events_at_once(c, run_id, events):
                    c.execute("ROLLBACK")
                    return None
                c.execute("COMMIT")
            except sqlite3.DatabaseError as exc:
                with contextlib.suppress(sqlite3.DatabaseError):
                    c.execute("ROLLBACK")
                raise self._translate(exc) from exc
            except BaseException:
                if c.in_transaction:
                    c.execute("ROLLBACK")
                raise
        return bool(rows[0][0])

    def _append_many(self, items: Sequence[Append]) -> None:
        """A batch of step appends (one record each, no blobs: the step path), the way
        :meth:`_append_quick` writes one: in one ``BEGIN IMMEDIATE`` transaction, each
        append's fenced upsert and its events, with no savepoint and none of the
        transaction path's layers (inside a batch they cost about as much as the rest of
        the append). Should any be refused (a stale token, another record stored there),
        skip an event as stored already, or fail, the transaction is rolled back and the
        written-once path writes the batch, a savepoint per append, which explains each
        refusal alone: nothing is written twice, and no caller's outcome is guessed."""
        if not (
            all(
                i.write is not None or (len(i.records) == 1 and not i.records[0].blobs)
                for i in items
            )
            and self._batched(sorted(items, key=lambda i: i.run_id))
        ):
            super()._append_many(items)

    def _shared_write(self, run_id: str, op: Callable[[Tx], T]) -> T:
        """``op`` as a member of group commit (see :meth:`Backend._shared_write`): alone,
        its own transaction at once, as :meth:`_writing`; while a commit is in progress,
        queued with the appends and run in the next shared transaction in a savepoint
        of its own. On SQLite's one writer a run's creation, claim or finish written
        apart held every batch up for its own fsync (100 runs of 10 steps: 300 such
        commits beside ~20 batches)."""
        item = Append(run_id, 0, (), (), durable=True, write=op)
        self._group.submit(item)
        out: T = item.value
        return out

    def _batched(self, ordered: Sequence[Append]) -> bool:
        """Write ``ordered`` (see :meth:`_append_many`); False when it wrote nothing and
        the savepoint path must."""
        try:
            params = [
                None if i.write is not None else record_params(i.run_id, i.records[0])
                for i in ordered
            ]
        except Exception:
            return False  # a record that fails its check: its own error, said alone
        for item, p in zip(ordered, params, strict=True):
            if p is not None:
                p["token"] = item.token
        cancels: list[bool] = []
        failed: dict[int, BaseException] = {}
        with self._lock:
            c = self._live()
            try:
                self._commit_level(c, any(i.durable for i in ordered))
                c.execute("BEGIN IMMEDIATE")
            except sqlite3.DatabaseError as exc:
                raise self._translate(exc) from exc  # as the savepoint path's own BEGIN
            except BaseException:
                _abandon(c)  # an interrupt raised as BEGIN returned: it began
                raise
            try:
                for item, p in zip(ordered, params, strict=True):
                    if p is None:
                        # A shared write, in its savepoint (as the savepoint path runs
                        # it): its own refusal is its own error; the database's is the
                        # batch's, which the savepoint path then writes again from the
                        # start.
                        try:
                            with _SQLiteTx(c, self).savepoint():
                                item.value = item.write(_SQLiteTx(c, self))  # type: ignore[misc]
                        except (LeaseLost, StoreError) as exc:
                            failed[id(item)] = exc
                        except Exception as exc:
                            if isinstance(exc, sqlite3.DatabaseError):
                                raise
                            failed[id(item)] = exc
                        cancels.append(False)
                        continue
                    rows = c.execute(_Q["append_record"], p).fetchall()
                    if not rows or (
                        item.events and not self._events_at_once(c, item.run_id, item.events)
                    ):
                        c.execute("ROLLBACK")
                        return False
                    cancels.append(bool(rows[0][0]))
                c.execute("COMMIT")
            except Exception:
                # A value refused or one the driver cannot bind (a lone surrogate is a
                # UnicodeEncodeError, no database error), a full disk: the savepoint path
                # runs the same statements and says whose error it is (or every caller's,
                # for the transaction's).
                with contextlib.suppress(sqlite3.DatabaseError):
                    c.execute("ROLLBACK")
                return False
            except BaseException:
                if c.in_transaction:
                    c.execute("ROLLBACK")
                raise
        for item, cancel in zip(ordered, cancels, strict=True):
            item.result, item.error = cancel, failed.get(id(item))
        return True

    def _write_events(self, c: sqlite3.Connection, run_id: str, events: Sequence[NewEvent]) -> None:
        """Number ``events`` after the run's newest and insert them, inside the open write
        transaction (whose lock orders them); one already stored (same dedupe) is skipped.

        One statement per event, plus one to move the run's cursor: each insert takes its
        cursor from ``runs.last_event`` in SQL and lets the unique dedupe index skip a
        repeat, so the step's write needs no reads through the library (the stream is on
        every step's path; docs/benchmarks.md has the cost).
        """
        if not events:
            return
        added = 0
        for e in events:
            params = {
                "run_id": run_id,
                "offset": added + 1,
                "kind": e.kind,
                "position": e.position,
                "data": e.data,
                "at": e.at,
                "dedupe": e.dedupe,
            }
            added += c.execute(_Q["insert_event"], params).rowcount
        if added:
            c.execute(_Q["advance_last_event"], {"run_id": run_id, "added": added})

    def _events_at_once(
        self, c: sqlite3.Connection, run_id: str, events: Sequence[NewEvent]
    ) -> bool:
        """:meth:`_write_events` for the step path: a few events in one statement (a
        step's write: one statement less), each given the cursor its place gives it,
        as the loop numbers them when none is skipped. False when one was skipped as
        stored already (its dedupe): the cursors given the others would leave a gap, so
        the caller rolls back and the transaction path numbers them one by one."""
        n = len(events)
        if n > _EVENTS_AT_ONCE_MAX:
            self._write_events(c, run_id, events)
            return True
        params: list[Any] = []
        for e in events:
            params += (e.kind, e.position, e.data, e.at, e.dedupe)
        params.append(run_id)
        if c.execute(_events_at_once_sql(n), params).rowcount != n:
            return False
        c.execute(_Q["advance_last_event"], {"run_id": run_id, "added": n})
        return True

    def wait_for_events(self, run_id: str, timeout_s: float) -> None:
        """SQLite has no notifications: followers poll, so this just waits."""
        time.sleep(timeout_s)

    # -- the stream writer's own connection (durably.store.streamwriter) -----------------

    _stream_conn: tuple[int, sqlite3.Connection] | None = None
    # Makes os.fork() wait for the stream writer's transaction in progress, as the
    # store's lock does for its own (_before_fork): a child forked inside one inherits
    # SQLite's process-wide lock state and could never write the journal.
    _stream_gate: ForkGate | None = None

    def _stream_transact(self, op: Callable[[Tx], None]) -> None:
        """``op`` in one ``BEGIN IMMEDIATE`` transaction on the stream writer's
        connection: ``synchronous=NORMAL`` (in WAL mode a commit then writes the WAL
        without an fsync) and no checkpoints of its own (those fsync; the store's
        connection runs them). An in-memory database has one connection: it is used."""
        if self.path == ":memory:":
            self._writing(op)
            return
        held = self._stream_conn
        if held is None or held[0] != os.getpid():
            conn = sqlite3.connect(
                self.path,
                timeout=self.busy_timeout_s,
                isolation_level=None,
                check_same_thread=False,
            )
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_s * 1000)}")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("PRAGMA wal_autocheckpoint = 0")
            held = self._stream_conn = (os.getpid(), conn)
        c = held[1]
        if self._stream_gate is None:  # only the writer thread gets here
            self._stream_gate = ForkGate()
        with self._stream_gate.inside():
            c.execute("BEGIN IMMEDIATE")
            try:
                op(_SQLiteTx(c, self))
            except BaseException:
                with contextlib.suppress(sqlite3.DatabaseError):
                    c.execute("ROLLBACK")
                raise
            c.execute("COMMIT")

    def _stream_close_conn(self) -> None:
        held, self._stream_conn = self._stream_conn, None
        if held is not None and held[0] == os.getpid():  # never one inherited by a fork
            held[1].close()

    # -- liveness and time: SQLite shares this host's processes and clock ---------------

    def hold_owner(self, owner: Owner) -> None:
        """Nothing to hold: SQLite judges owners by their pids (same host only)."""

    def owner_lock_lost(self, ping: bool = True) -> bool:
        """Never: there is no owner lock on SQLite."""
        return False

    def owners_without_lock(self, owners: Sequence[str]) -> set[str]:
        """All of them: SQLite has no lock that could show an owner alive."""
        return set(owners)

    def db_time(self) -> float | None:
        """None: the database file has no clock but this host's."""
        return None

    def close(self) -> None:
        """Close this process's connection; never one inherited across a fork (closing it
        could checkpoint and delete the WAL the parent is still using)."""
        self._close_stream()
        with self._lock:
            if self._pid == os.getpid():
                self._conn.close()


# One INSERT of several events (a step's started and completed, with any buffered ones):
# each takes the cursor its place gives it past the run's newest, as insert_event's loop
# numbers them when none is skipped. By how many events, made on first use.
_EVENTS_AT_ONCE_MAX: Final = 8
_EVENTS_AT_ONCE: dict[int, str] = {}


def _events_at_once_sql(n: int) -> str:
    sql = _EVENTS_AT_ONCE.get(n)
    if sql is None:
        rows = ", ".join(f"({i}, ?, ?, ?, ?, ?)" for i in range(1, n + 1))
        sql = _EVENTS_AT_ONCE[n] = (
            "INSERT INTO events (run_id, cursor, kind, position, data, at, dedupe)"
            " SELECT r.run_id, r.last_event + v.column1, v.column2, v.column3, v.column4,"
            f" v.column5, v.column6 FROM runs r, (VALUES {rows}) v WHERE r.run_id = ?"
            " ON CONFLICT (run_id, dedupe) DO NOTHING"
        )
    return sql


class _SQLiteTx:
    """:class:`~durably.store.tx.Tx` on the store's connection (``_writing``, ``_reading``)."""

    __slots__ = ("_c", "_store")
    retried = False  # a SQLite commit's outcome is never unknown to its caller

    def __init__(self, c: sqlite3.Connection, store: SQLiteStore) -> None:
        self._c = c
        self._store = store

    def q(self, name: str, /, **params: Any) -> sqlite3.Cursor:
        return self._c.execute(_Q[name], params)

    def one(self, name: str, /, **params: Any) -> Any:
        return self._c.execute(_Q[name], params).fetchone()

    def scalar(self, name: str, /, **params: Any) -> Any:
        row = self._c.execute(_Q[name], params).fetchone()
        return None if row is None else row[0]

    def many(self, name: str, rows: Sequence[dict[str, Any]], /) -> None:
        self._c.executemany(_Q[name], rows)

    def array(self, values: Sequence[Any]) -> str:
        return json.dumps(list(values))

    def notify(self) -> None:
        """Nothing: SQLite's workers poll."""

    def events(self, run_id: str, events: Sequence[NewEvent]) -> None:
        self._store._write_events(self._c, run_id, events)

    @contextlib.contextmanager
    def savepoint(self) -> Iterator[None]:
        self._c.execute("SAVEPOINT part")
        try:
            yield
        except sqlite3.IntegrityError as exc:  # a row refused: this part's error alone
            self._undo_part()
            raise self._store._translate(exc) from exc
        except (Exception, LeaseLost):
            self._undo_part()
            raise
        self._c.execute("RELEASE part")

    def _undo_part(self) -> None:
        # A full disk or an I/O error may have rolled the whole transaction back already
        # (SQLite does for some): no savepoint is left to go back to, and the error that
        # did it (a StoreDiskFull to its callers) is the one to raise, not "no such
        # savepoint".
        if self._c.in_transaction:
            self._c.execute("ROLLBACK TO part")
            self._c.execute("RELEASE part")


def _abandon(c: sqlite3.Connection) -> None:
    """Roll back a transaction a ``BaseException`` left (a KeyboardInterrupt is raised as
    the statement that began it returns): left open, it would keep the database's writer
    lock and fail every later write of this connection."""
    if c.in_transaction:
        with contextlib.suppress(sqlite3.DatabaseError):
            c.execute("ROLLBACK")


def _exec_script(c: sqlite3.Connection, script: str) -> None:
    """Run a multi-statement script inside the current transaction.

    ``executescript`` would COMMIT first; splitting keeps a migration atomic.
    """
    buf = ""
    for line in script.splitlines(keepends=True):
        if line.lstrip().startswith("--"):
            continue
        buf += line
        if sqlite3.complete_statement(buf):
            c.execute(buf)
            buf = ""
    if buf.strip():
        raise StoreError(f"incomplete SQL at the end of a migration: {buf[:80]!r}")
