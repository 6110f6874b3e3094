"""Workers as real processes on SQLite and on the real PostgreSQL server."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import fleet_app
import pytest
from fleet_support import HERE, Spawn, stop_between_writes, wait_until

import durably

# The lease of a worker that takes a run over, where that lease is not what a test checks.
RESCUER_LEASE_S = 6.0


def world_rows(world_path: str, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(world_path) as w:
        return w.execute(sql).fetchall()


def test_three_workers_two_hundred_runs_every_effect_once(
    engine: durably.Engine, spawn_worker: Spawn, world_path: str
) -> None:
    handles = [engine.start("order", i, run_id=f"order-{i}") for i in range(200)]
    workers = [spawn_worker(concurrency=4) for _ in range(3)]
    results = [h.result(timeout_s=120) for h in handles]
    keys = [engine.get_run(f"order-{i}").key("1") for i in range(200)]
    assert results == [{"receipt": f"done:{keys[i]}", "after": i + 1} for i in range(200)]
    runs = engine.store.list_runs(limit=1000)
    assert len(runs) == 200 and {r.status for r in runs} == {"completed"}
    assert {r.starts for r in runs} == {1}  # every run completed once, no re-drive
    effects = world_rows(world_path, "SELECT key, requests FROM effects")
    assert len(effects) == 200 and {n for _, n in effects} == {1}
    execs = world_rows(world_path, "SELECT step, count(*) FROM executions GROUP BY step")
    assert dict(execs) == {"charge": 200, "after": 200}
    used = world_rows(world_path, "SELECT count(DISTINCT pid) FROM executions")[0][0]
    assert used >= 2  # the work was shared
    for w in workers:
        w.send_signal(signal.SIGTERM)
    assert [w.wait(30) for w in workers] == [0, 0, 0]


def test_sigkill_of_a_worker_its_runs_finish_elsewhere(
    engine: durably.Engine, spawn_worker: Spawn, world_path: str
) -> None:
    victim = spawn_worker(lease_s=2, concurrency=4)
    handles = [engine.start("slow", i, 1.0, run_id=f"slow-{i}") for i in range(4)]
    wait_until(
        lambda: (
            len(world_rows(world_path, "SELECT * FROM executions WHERE step='slow_charge'")) >= 2
        ),
        30,
        "the victim to start",
    )
    victim.kill()
    victim.wait(10)
    spawn_worker(lease_s=2, concurrency=4)
    results = [h.result(timeout_s=60) for h in handles]
    assert [r["after"] for r in results] == [1, 2, 3, 4]
    effects = world_rows(world_path, "SELECT key, requests FROM effects")
    assert len(effects) == 4  # one row per key: an interrupted charge re-ran with its key
    pids = world_rows(world_path, "SELECT DISTINCT pid FROM executions")
    assert len(pids) == 2
    assert all(r.status == "completed" for r in engine.store.list_runs())


def test_sigkill_between_effect_and_record_retries_with_the_same_key(
    engine: durably.Engine, spawn_worker: Spawn, world_path: str
) -> None:
    """The window that matters most: the charge reached the world, the worker died before
    recording it. The next worker re-runs the charge with the same key (the world
    deduplicates it: one effect, two requests), and replays the step before it."""
    victim = spawn_worker(lease_s=30, concurrency=1, extra_env={"FLEET_KILL_AT": "1:effect"})
    handle = engine.start("order", 3, run_id="window")
    assert victim.wait(60) == -signal.SIGKILL
    assert world_rows(world_path, "SELECT requests FROM effects") == [(1,)]
    assert engine.get_run("window").status == "running"  # effect done, not recorded
    rescuer = spawn_worker(lease_s=30, concurrency=1)  # same host, dead owner: at once
    result = handle.result(timeout_s=60)
    assert world_rows(world_path, "SELECT requests FROM effects") == [(2,)]
    execs = world_rows(world_path, "SELECT step, key, pid, token FROM executions ORDER BY rowid")
    [(_, key1, pid1, token1), (_, key2, pid2, token2), after] = execs
    assert key1 == key2 and (pid1, pid2) == (victim.pid, rescuer.pid) and token2 > token1
    assert result == {"receipt": f"done:{key1}", "after": 4}
    assert after[0] == "after" and after[2] == rescuer.pid
    run = engine.get_run("window")
    assert run.status == "completed" and run.starts == 2


@pytest.mark.parametrize("journal_url", ["sqlite"], indirect=True)
def test_a_run_three_leases_long_keeps_its_worker(
    engine: durably.Engine, spawn_worker: Spawn, world_path: str
) -> None:
    """Real processes, real time: the charge takes three leases; the heartbeat must keep
    the lease, so the second worker, polling all along, never takes the run over (the
    in-process test with a fake clock is tests/unit/test_lease.py)."""
    first = spawn_worker(lease_s=1.5, concurrency=1)
    handle = engine.start("slow", 2, 4.5, run_id="long-lease")
    charges = "SELECT pid FROM executions WHERE step='slow_charge'"
    wait_until(lambda: world_rows(world_path, charges) != [], 30, "the charge to start")
    spawn_worker(lease_s=1.5, concurrency=1)
    assert handle.result(timeout_s=60)["after"] == 3
    assert world_rows(world_path, charges) == [(first.pid,)]
    run = engine.get_run("long-lease")
    assert (run.starts, run.fencing_token) == (1, 1)


def test_a_stalled_worker_is_fenced_out(
    engine: durably.Engine,
    spawn_worker: Spawn,
    world_path: str,
    tmp_path: Path,
    journal_url: str,
) -> None:
    stalled = spawn_worker(lease_s=1.5, concurrency=1)
    handle = engine.start("slow", 7, 3.0, run_id="fenced")
    wait_until(
        lambda: world_rows(world_path, "SELECT pid FROM executions WHERE step='slow_charge'") != [],
        30,
        "the charge to start",
    )
    stop_between_writes(stalled, journal_url)  # a long GC pause, a partition...
    time.sleep(2.0)  # past its lease
    # The rescuer's lease is not under test: a long one, so a loaded machine that delays
    # its heartbeat past its own deadline cannot make it stop and claim the run again (a
    # third token, correct but not what this test checks).
    rescuer = spawn_worker(lease_s=RESCUER_LEASE_S, concurrency=1)
    key = engine.get_run("fenced").key("1")
    assert handle.result(timeout_s=60) == {"receipt": f"done:{key}", "after": 8}
    stalled.send_signal(signal.SIGCONT)
    # The stalled worker wakes inside its charge: the world refuses its stale token, its
    # append is refused (StaleLease), and it runs no further step of the run.
    wait_until(
        lambda: world_rows(world_path, "SELECT * FROM refusals") != [],
        30,
        "the world to refuse the stale writer",
    )
    time.sleep(0.5)
    [(refused_key, old, new)] = world_rows(world_path, "SELECT key, token, newest FROM refusals")
    assert refused_key == key and old < new
    assert world_rows(world_path, "SELECT requests FROM effects") == [(1,)]
    by_pid = dict(
        world_rows(world_path, "SELECT pid, group_concat(step) FROM executions GROUP BY pid")
    )
    assert by_pid[stalled.pid] == "slow_charge"  # nothing after the stall
    assert sorted(by_pid[rescuer.pid].split(",")) == ["after", "slow_charge"]
    run = engine.get_run("fenced")
    assert run.status == "completed" and run.fencing_token == 2
    # The journal fenced it too: its append was refused with StaleLease (a worker that
    # merely failed, or hit a conflicting record, would say something else).
    stalled.send_signal(signal.SIGTERM)
    assert stalled.wait(30) == 0
    log = (tmp_path / "worker-0.log").read_text()
    assert "lost run fenced to another worker" in log, log
    assert "0 completed, 0 failed, 0 cancelled, 1 lost to other workers" in log, log


def test_the_journal_alone_fences_a_stalled_worker(
    engine: durably.Engine,
    spawn_worker: Spawn,
    world_path: str,
    tmp_path: Path,
    journal_url: str,
) -> None:
    """The stalled worker wakes while the new owner is still inside the same step, so the
    world has not seen the newer token and takes its effect (deduplicated later by key):
    only the journal can stop it now. Its append is refused (StaleLease) and it runs
    nothing after; the run completes once, by the new owner."""
    stalled = spawn_worker(lease_s=1.5, concurrency=1)
    handle = engine.start("slow", 5, 3.0, run_id="journal-fenced")
    charges = "SELECT pid FROM executions WHERE step='slow_charge' ORDER BY rowid"
    wait_until(lambda: world_rows(world_path, charges) != [], 30, "the charge to start")
    stop_between_writes(stalled, journal_url)  # see the test above
    time.sleep(2.0)  # past its lease
    rescuer = spawn_worker(lease_s=RESCUER_LEASE_S, concurrency=1)  # see the test above
    wait_until(lambda: len(world_rows(world_path, charges)) == 2, 30, "the rescuer's charge")
    stalled.send_signal(signal.SIGCONT)  # its sleep is over: it applies, then appends
    result = handle.result(timeout_s=60)
    stalled.send_signal(signal.SIGTERM)
    assert stalled.wait(30) == 0
    log = (tmp_path / "worker-0.log").read_text()
    assert "lost run journal-fenced to another worker" in log, log
    assert "0 completed, 0 failed, 0 cancelled, 1 lost to other workers" in log, log
    by_pid = dict(
        world_rows(world_path, "SELECT pid, group_concat(step) FROM executions GROUP BY pid")
    )
    assert by_pid[stalled.pid] == "slow_charge"  # nothing after its stale append
    assert sorted(by_pid[rescuer.pid].split(",")) == ["after", "slow_charge"]
    [(key, requests)] = world_rows(world_path, "SELECT key, requests FROM effects")
    assert requests in (1, 2) and result == {"receipt": f"done:{key}", "after": 6}
    run = engine.get_run("journal-fenced")
    assert run.status == "completed" and run.fencing_token == 2


def test_concurrent_starts_of_one_run_id_make_one_run(
    journal_url: str, world_path: str, tmp_path: Path
) -> None:
    script = (
        "import sys, time, fleet_app\n"
        "e = fleet_app.make_engine(sys.argv[1])\n"
        "go = float(sys.argv[2])\n"
        "time.sleep(max(0, go - time.time()))\n"
        "h = e.start('order', int(sys.argv[3]), run_id='same')\n"
        "print(h.run_id)\n"
    )
    env = {**os.environ, "FLEET_WORLD": world_path, "PYTHONPATH": str(HERE)}
    go = time.time() + 1.5
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, journal_url, str(go), "5"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    outs = [p.communicate(timeout=60) for p in procs]
    assert [o[0].strip() for o in outs] == ["same"] * 4, [o[1] for o in outs]
    other = subprocess.run(
        [sys.executable, "-c", script, journal_url, "0", "6"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert other.returncode != 0 and "other input" in other.stderr
    e = durably.Engine(journal_url)
    try:
        assert [r.run_id for r in e.store.list_runs()] == ["same"]
    finally:
        e.close()


def test_sigterm_drains_then_releases(
    engine: durably.Engine, spawn_worker: Spawn, world_path: str
) -> None:
    # A drain shorter than the step (1 s < 3 s): the worker gives the run back unfinished.
    # (8 s under a 5 s drain took 14 s; the margin is the same 2 s either way.)
    w = spawn_worker(lease_s=30, concurrency=1, drain_s=1)
    handle = engine.start("slow", 1, 3.0, run_id="long")
    wait_until(
        lambda: world_rows(world_path, "SELECT * FROM executions WHERE step='slow_charge'") != [],
        30,
        "the charge to start",
    )
    w.send_signal(signal.SIGTERM)
    assert w.wait(30) == 0  # drain_s=1 < the 3 s step: it gives the run back
    run = engine.get_run("long")
    assert run.owner is None and run.status == "running"
    t0 = time.monotonic()
    spawn_worker(lease_s=30, concurrency=1)  # picks it up at once, no lease wait
    assert handle.result(timeout_s=60)["after"] == 2
    assert time.monotonic() - t0 < 25


@pytest.mark.postgres
@pytest.mark.parametrize("journal_url", ["postgres"], indirect=True)
def test_pg_terminate_backend_mid_run_loses_nothing(
    pg_url: str, spawn_worker: Spawn, world_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import uuid

    import psycopg

    app = f"durably-fleet-{uuid.uuid4().hex[:8]}"
    url = f"{pg_url}&application_name={app}"
    monkeypatch.setenv("FLEET_WORLD", world_path)
    engine = fleet_app.make_engine(pg_url)
    try:
        spawn_worker(lease_s=30, concurrency=2, extra_env={"DURABLY_URL": url})
        handles = [engine.start("slow", i, 1.5, run_id=f"term-{i}") for i in range(2)]
        wait_until(
            lambda: len(world_rows(world_path, "SELECT * FROM executions")) >= 2,
            30,
            "both charges to start",
        )
        with psycopg.connect(pg_url, autocommit=True) as admin:
            killed = admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name = %s",
                (app,),
            ).fetchall()
        assert killed, "the worker had no connection to terminate"
        assert [h.result(timeout_s=60)["after"] for h in handles] == [1, 2]
        assert world_rows(world_path, "SELECT requests FROM effects") == [(1,), (1,)]
        assert {r.starts for r in engine.store.list_runs()} == {1}  # nothing re-driven
    finally:
        engine.close()
