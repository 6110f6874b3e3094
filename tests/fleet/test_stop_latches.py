"""Stop signals are latched, and a driver checks its own lease deadline: real worker
processes, a real second claim, a real SIGSTOP, on SQLite and on PostgreSQL."""

from __future__ import annotations

import os
import signal
import sqlite3
import time
from pathlib import Path

import pytest
from fleet_support import Forwarder, Spawn, run_row_locked, stop_between_writes, wait_until

import durably
from durably.store.base import Owner

try:
    from psycopg.conninfo import conninfo_to_dict
except ImportError:  # the PostgreSQL tests skip without psycopg
    pass


def executions(world_path: str, pid: int) -> list[str]:
    with sqlite3.connect(world_path) as w:
        rows = w.execute("SELECT step FROM executions WHERE pid = ? ORDER BY rowid", (pid,))
        return [r[0] for r in rows]


def log_says(tmp_path: Path, text: str) -> bool:
    return any(text in p.read_text() for p in tmp_path.glob("worker-*.log"))


def test_after_a_takeover_a_bare_except_runs_no_more_steps(
    engine: durably.Engine, spawn_worker: Spawn, world_path: str, tmp_path: Path
) -> None:
    worker = spawn_worker(lease_s=30, concurrency=1)
    gate = tmp_path / "gate"
    engine.start("stubborn", str(gate), run_id="s")
    wait_until(lambda: executions(world_path, worker.pid) == ["first"], 60, "the first step")
    # A second owner (this process) takes the run over: its fencing token goes up.
    taken = engine.store.claim("s", Owner("rescuer", 1, "1"), 30, 10, lambda _: True)
    gate.touch()
    wait_until(lambda: log_says(tmp_path, "lost run s"), 60, "the worker to give up")
    # e1 was in flight when its write was refused (unless the heartbeat learned of the
    # takeover first); the refusal is latched, so the workflow's bare except cannot carry
    # on with e2 and e3.
    assert executions(world_path, worker.pid) in (["first", "e1"], ["first"])
    assert engine.get_run("s").fencing_token == taken.fencing_token


def test_a_worker_stopped_past_its_lease_runs_no_further_step(
    engine: durably.Engine,
    spawn_worker: Spawn,
    world_path: str,
    tmp_path: Path,
    journal_url: str,
) -> None:
    worker = spawn_worker(lease_s=1.5, concurrency=1)
    gate = tmp_path / "gate"
    engine.start("pause", str(gate), run_id="p")
    # Its result recorded too, so the stop lands between the two steps as meant: a stop
    # while the worker was still writing it would hold SQLite's write lock through the
    # pause (the rescuer's claim then waits for ever), or leave the write to be refused
    # after the takeover (a refusal, not the worker's own deadline).
    wait_until(
        lambda: (
            executions(world_path, worker.pid) == ["first"]
            and [r.status for r in engine.history("p")] == ["ok"]
        ),
        60,
        "the first step recorded",
    )
    stop_between_writes(worker, journal_url)  # between two steps: a GC pause, a VM stop...
    gate.touch()  # once woken, its workflow code goes on to "next" at once
    time.sleep(2.0)  # past its 1.5 s lease
    taken = engine.store.claim("p", Owner("rescuer", 1, "1"), 30, 10, lambda _: False)
    with run_row_locked(journal_url, "p"):
        worker.send_signal(signal.SIGCONT)
        time.sleep(2.0)  # its heartbeat waits on the lock; its own deadline has passed
    wait_until(lambda: log_says(tmp_path, "lost run p"), 60, "the worker to give up")
    # The log says why: its own deadline (on SQLite the local check comes first, the
    # renewal waiting on the lock; on PostgreSQL the fenced renewal may be refused first,
    # and then the log says both).
    assert log_says(tmp_path, "past its lease deadline"), (tmp_path / "worker-0.log").read_text()
    assert executions(world_path, worker.pid) == ["first"]  # "next" never ran there
    worker.kill()  # else it would claim the run again once released, legitimately
    worker.wait(30)
    engine.store.release("p", taken.fencing_token)
    assert engine.resume("p") == "done"
    assert executions(world_path, os.getpid()) == ["next"]


@pytest.mark.postgres
@pytest.mark.parametrize("journal_url", ["postgres"], indirect=True)
def test_a_worker_whose_database_refuses_at_first_retries_then_works(
    pg_url: str, engine: durably.Engine, spawn_worker: Spawn, tmp_path: Path
) -> None:
    info = conninfo_to_dict(pg_url)
    host, port = str(info.get("host") or "127.0.0.1"), str(info.get("port") or 5432)
    assert f"@{host}:{port}/" in pg_url, "this test rewrites a postgresql://user@host:port/ URL"
    fwd = Forwarder((host, int(port)))
    url = pg_url.replace(f"@{host}:{port}/", f"@127.0.0.1:{fwd.port}/", 1)
    try:
        worker = spawn_worker(lease_s=30, concurrency=1, extra_env={"DURABLY_URL": url})
        wait_until(
            lambda: log_says(tmp_path, "cannot open the journal") or worker.poll() is not None,
            60,
            "the worker to meet the refused connection",
        )
        assert worker.poll() is None, (tmp_path / "worker-0.log").read_text()
        fwd.open()  # the database comes up
        handle = engine.start("order", 3, run_id="late")
        assert handle.result(timeout_s=90)["after"] == 4
        assert "Traceback" not in (tmp_path / "worker-0.log").read_text()
    finally:
        fwd.close()
