"""A full disk, for real: SQLite's ``max_page_count`` (portable) and a size-limited tmpfs
(Linux, root). A full disk is reported as such, stops the run resumable (never
``failed``), and the run completes once there is space, without re-running recorded
steps."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import durably
from durably.store.sqlite import SQLiteStore

BIG = "x" * 300_000  # a step output larger than the space left


def fill(path: Path) -> None:
    """Write zeros to ``path`` until the file system refuses more."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs mounted for this test."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a size-limited tmpfs needs root and mount(8)")
    where = tmp_path / "disk"
    where.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def workflow(engine: durably.Engine, before_big: Callable[[], None]) -> tuple[object, Counter[str]]:
    count: Counter[str] = Counter()

    def small(*, idempotency_key: str) -> str:
        count["small"] += 1
        return "small"

    def big(*, idempotency_key: str) -> str:
        count["big"] += 1
        before_big()
        return BIG

    @engine.workflow(name="grow")
    def grow(ctx: durably.Context) -> int:
        caught = []
        out = [ctx.step("small", small)]
        try:
            out.append(ctx.step("big", big))
        except Exception as exc:  # the store's trouble must not land here
            caught.append(exc)
        assert not caught, caught
        return sum(len(o) for o in out)

    return grow, count


def test_opening_a_journal_on_a_full_disk_says_disk_full(small_disk: Path) -> None:
    url = f"sqlite:///{small_disk / 'j.db'}"
    SQLiteStore(url, durably.FakeClock()).close()
    fill(small_disk / "filler")
    with pytest.raises(durably.StoreError, match="disk is full") as err:
        SQLiteStore(url, durably.FakeClock())
    assert "Free space" in str(err.value)


def test_a_disk_that_fills_mid_run_stops_it_resumable(small_disk: Path) -> None:
    url = f"sqlite:///{small_disk / 'j.db'}"
    engine = durably.Engine(url, clock=durably.FakeClock())
    fills = [1]
    wf, count = workflow(
        engine, lambda: fill(small_disk / "filler") if fills and fills.pop() else None
    )
    with pytest.raises(durably.StoreError, match="disk is full"):
        engine.run(wf, run_id="r")
    assert engine.get_run("r").status == "running"  # resumable, not failed
    (small_disk / "filler").unlink()
    # The lease could not be released on the full disk; this process knows it stopped
    # driving the run, so its retry is not refused for lease_s.
    assert engine.run(wf, run_id="r") == len("small") + len(BIG)
    assert count == Counter({"small": 1, "big": 2})  # big re-ran: it was never recorded
    engine.close()


def test_sqlite_max_page_count_is_a_full_disk_too(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    engine = durably.Engine(url, clock=durably.FakeClock())
    store = engine.store
    assert isinstance(store, SQLiteStore)

    caps = [1]

    def cap() -> None:
        if not caps or not caps.pop():
            return
        # A database size limit reached: SQLITE_FULL, as on a full disk.
        pages = store._conn.execute("PRAGMA page_count").fetchone()[0]
        store._conn.execute(f"PRAGMA max_page_count = {pages}")

    wf, count = workflow(engine, cap)
    with pytest.raises(durably.StoreError, match="disk is full") as err:
        engine.run(wf, run_id="r")
    assert "Free space" in str(err.value)
    run = engine.get_run("r")
    assert run.status == "running" and run.owner is None
    store._conn.execute("PRAGMA max_page_count = 1073741823")
    assert engine.run(wf, run_id="r") == len("small") + len(BIG)
    assert count == Counter({"small": 1, "big": 2})  # big re-ran: never recorded
    engine.close()


def test_opening_a_fresh_journal_waits_for_one_being_migrated(tmp_path: Path) -> None:
    import sqlite3
    import threading

    path = tmp_path / "j.db"
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")  # another process creating the journal
    threading.Timer(0.5, lambda: holder.execute("ROLLBACK")).start()
    store = SQLiteStore(f"sqlite:///{path}", durably.FakeClock(), busy_timeout_s=0.05)
    assert store.list_runs() == []
    store.close()
    holder.close()
