"""SQLite-specific behaviour of the embedded store."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from durably.clock import FakeClock
from durably.store.sqlite import SQLiteStore


def test_a_forked_child_never_touches_the_parents_connection(tmp_path: Path) -> None:
    store = SQLiteStore(f"sqlite:///{tmp_path / 'j.db'}", FakeClock())
    parent_conn = store._conn
    store.list_runs()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            store.list_runs()
            # SQLite's rule: a connection must not be used across a fork.
            code = 0 if store._conn is not parent_conn else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert store._conn is parent_conn
    store.close()


def test_opening_an_up_to_date_journal_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    SQLiteStore(f"sqlite:///{path}", FakeClock()).close()
    before = os.stat(path).st_mtime_ns, os.path.getsize(path)
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # another writer holds the write lock
    try:
        store = SQLiteStore(f"sqlite:///{path}", FakeClock(), busy_timeout_s=0.1)
        assert store.list_runs() == []  # opened and read without needing the lock
        store.close()
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert (os.stat(path).st_mtime_ns, os.path.getsize(path)) == before
