"""Real concurrency: threads and processes hammer one key; the work runs exactly once.

Effects are counted outside the store (a file, or a table the work writes), and crashes are
real SIGKILLs of child processes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from idem_helpers import HERE, count_lines, subprocess_env

from durably.errors import IdempotencyKeyInFlight
from durably.idempotency import IdempotencyStore

THREADS = 16
PROCESSES = 6


def _effects_rows(store: IdempotencyStore) -> int:
    with store._db.transaction("idempotency.sql") as tx:
        return int(tx.conn.execute("SELECT count(*) FROM effects").fetchone()[0])


def _create_effects(store: IdempotencyStore) -> None:
    with store._db.transaction("idempotency.sql") as tx:
        tx.conn.execute("CREATE TABLE IF NOT EXISTS effects (what TEXT NOT NULL)")


def _hammer(n: int, call: Any) -> Counter[str]:
    barrier = threading.Barrier(n)
    outcomes: list[str] = []
    lock = threading.Lock()

    def one() -> None:
        barrier.wait()
        try:
            outcome = "replayed" if call().replayed else "ran"
        except IdempotencyKeyInFlight:
            outcome = "in_flight"
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return Counter(outcomes)


def pool(url: str, size: int) -> dict[str, int]:
    """``pool_size`` on PostgreSQL (SQLite opens a connection per thread and refuses it)."""
    return {} if url.startswith("sqlite") else {"pool_size": size}


def test_threads_run_the_work_once(db_url: str, tmp_path: Path):
    effect_file = tmp_path / "effects.txt"
    store = IdempotencyStore(db_url, **pool(db_url, 4))

    def effect() -> str:
        with effect_file.open("a") as f:
            f.write("ran\n")
        time.sleep(0.3)
        return "done"

    try:
        outcomes = _hammer(THREADS, lambda: store.execute("hot", "fp", effect))
        assert outcomes["ran"] == 1, outcomes
        assert outcomes["ran"] + outcomes["in_flight"] + outcomes["replayed"] == THREADS
        assert count_lines(effect_file) == 1
        assert store.execute("hot", "fp", effect).replayed
    finally:
        store.close()


def test_threads_in_transaction_wait_and_replay(db_url: str):
    store = IdempotencyStore(db_url, **pool(db_url, THREADS))
    _create_effects(store)

    def effect(conn: Any) -> str:
        conn.execute("INSERT INTO effects (what) VALUES ('ticket')")
        time.sleep(0.05)
        return "done"

    try:
        outcomes = _hammer(THREADS, lambda: store.execute("hot", "fp", effect, in_transaction=True))
        # Behind the first transaction the others wait for its commit, then replay it.
        assert outcomes == Counter({"ran": 1, "replayed": THREADS - 1})
        assert _effects_rows(store) == 1
    finally:
        store.close()


def test_processes_run_the_work_once(db_url: str, tmp_path: Path):
    IdempotencyStore(db_url).close()  # open once (the db_url fixture migrated) before the race
    effect_file = tmp_path / "effects.txt"
    start_at = time.time() + 2.0
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(HERE / "idem_worker.py"),
                "execute",
                db_url,
                "hot",
                str(start_at),
                str(effect_file),
                "0.5",
            ],
            stdout=subprocess.PIPE,
            env=subprocess_env(),
        )
        for _ in range(PROCESSES)
    ]
    outputs = [proc.communicate(timeout=60)[0] for proc in procs]
    assert [proc.returncode for proc in procs] == [0] * PROCESSES
    outcomes = Counter(json.loads(out)["outcome"] for out in outputs)
    assert outcomes["ran"] == 1, outcomes
    assert outcomes["ran"] + outcomes["in_flight"] + outcomes["replayed"] == PROCESSES
    assert count_lines(effect_file) == 1


def _start_hanging(db_url: str, tmp_path: Path, mode: str, lease_s: float) -> None:
    """Start a child that holds key 'k' mid-work, wait until it hangs, then SIGKILL it."""
    ready = tmp_path / f"ready-{mode}"
    proc = subprocess.Popen(
        [
            sys.executable,
            str(HERE / "idem_worker.py"),
            "hang",
            db_url,
            "k",
            str(ready),
            str(lease_s),
            mode,
        ],
        env=subprocess_env(),
    )
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert proc.poll() is None, "the child died before it was killed"
            assert time.monotonic() < deadline, "the child never reached its work"
            time.sleep(0.02)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)


def test_killed_owner_blocks_the_key_only_for_its_lease(db_url: str, tmp_path: Path):
    store = IdempotencyStore(db_url)
    try:
        # 2 s: the first try below must come within a lease of the child's last renewal,
        # and with 1 s a loaded machine was sometimes slower (no IdempotencyKeyInFlight).
        _start_hanging(db_url, tmp_path, "two-phase", lease_s=2.0)
        killed_at = time.monotonic()
        with pytest.raises(IdempotencyKeyInFlight):
            store.execute("k", "fp", lambda: "retried")
        while True:
            try:
                record = store.execute("k", "fp", lambda: "retried")
                break
            except IdempotencyKeyInFlight:
                assert time.monotonic() - killed_at < 60, "the dead owner's lease never ran out"
                time.sleep(0.05)
        # The retry took the work over; attempts tells that it was started twice.
        assert record.result == "retried" and record.attempts == 2 and not record.replayed
    finally:
        store.close()


def test_killed_owner_in_transaction_leaves_nothing_behind(db_url: str, tmp_path: Path):
    store = IdempotencyStore(db_url)
    _create_effects(store)
    try:
        _start_hanging(db_url, tmp_path, "in-transaction", lease_s=600)

        def effect(conn: Any) -> str:
            conn.execute("INSERT INTO effects (what) VALUES ('from the retry')")
            return "retried"

        # No lease to wait for: the crash rolled back the work and the marker together.
        record = store.execute("k", "fp", effect, in_transaction=True)
        assert record.result == "retried" and record.attempts == 1
        assert _effects_rows(store) == 1
    finally:
        store.close()
