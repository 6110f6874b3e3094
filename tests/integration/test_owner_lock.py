"""PostgreSQL owner locks (DESIGN "Ownership", issue 8 §3), and the clock check (issue 9
§3 "Clocks").

Every engine process holds a session advisory lock for its owner. A free lock does not
prove death (a dropped connection frees it), so an owner whose lock connection is killed
(``pg_terminate_backend``) treats that as losing the lease of every run it drives: the
run stops at its next step and the caller gets ``StaleLease``.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import psycopg
import pytest

import durably
import durably.store.owner
from durably.clock import FakeClock
from durably.ownership import CLOCK_SKEW_WARN_S, check_clock
from durably.store.postgres import PostgresStore
from durably.worker import Worker

pytestmark = pytest.mark.postgres
WAIT_S = 60.0  # generous: the machine is shared


def _wait(cond: Any, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_losing_the_owner_lock_connection_stops_the_run(pg_url: str) -> None:
    engine = durably.Engine(pg_url, lease_s=3.0)
    in_b, release_b = threading.Event(), threading.Event()
    ran: list[str] = []

    def step_b() -> str:
        in_b.set()
        release_b.wait(WAIT_S)
        return "b"

    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> str:
        ctx.step("a", lambda: ran.append("a") or "a")
        ctx.step("b", step_b)
        ctx.step("c", lambda: ran.append("c") or "c")
        return "done"

    outcome: list[BaseException | str] = []

    def drive() -> None:
        try:
            outcome.append(engine.run(wf, run_id="r"))
        except BaseException as exc:
            outcome.append(exc)

    t = threading.Thread(target=drive)
    t.start()
    try:
        assert in_b.wait(WAIT_S)
        store = engine.store
        assert isinstance(store, PostgresStore) and store._owner_conn is not None
        me = str(engine._leases.owner_now())
        assert store.owners_without_lock([me]) == set()  # held: alive
        backend = store._owner_conn.info.backend_pid
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (backend,))
        # The server frees the lock when the terminated backend has exited, a moment later.
        _wait(lambda: store.owners_without_lock([me]) == {me}, "the lock to be free")
        core = engine._attempts.active["r"].core
        _wait(lambda: core.lease_lost, "the lease keeper to notice the lost lock")
    finally:
        release_b.set()
        t.join(WAIT_S)
    assert ran == ["a"]  # step c never ran
    assert len(outcome) == 1 and isinstance(outcome[0], durably.StaleLease), outcome

    # The process takes its lock again on a new connection for its next claim.
    @engine.workflow(name="again")
    def again(ctx: durably.Context) -> int:
        return int(ctx.step("one", lambda: 1))

    assert engine.run(again, run_id="r2") == 1
    assert engine.store.owners_without_lock([str(engine._leases.owner_now())]) == set()
    engine.close()


def test_losing_the_owner_lock_gives_back_the_leases_of_the_runs_it_stops(pg_url: str) -> None:
    """The runs stopped by a lost owner lock are given back at once, while their steps
    still run here: another process takes them without waiting out a lease (60 s here)
    that nobody in this process will use."""
    engine = durably.Engine(pg_url, lease_s=60.0, heartbeat_s=0.2)
    other = durably.Engine(pg_url)
    in_b, release_b = threading.Event(), threading.Event()

    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> str:
        ctx.step("b", lambda: in_b.set() or release_b.wait(WAIT_S))
        return "done"

    outcome: list[BaseException | str] = []
    t = threading.Thread(target=lambda: _drive(engine, wf, "r", outcome))
    t.start()
    try:
        assert in_b.wait(WAIT_S)
        _terminate_owner_session(engine, pg_url)
        # The keeper beats every 0.2 s; a kept lease would stay for its 60 s.
        deadline = time.monotonic() + WAIT_S / 2
        while engine.get_run("r").owner is not None:
            assert time.monotonic() < deadline, "the stopped run's lease was kept"
            time.sleep(0.05)
        rival = durably.store.owner.Owner.current()
        taken = other.store.claim("r", rival, 60.0, 10, lambda _: False)
        assert taken.owner == str(rival)  # at once: no lease left to wait for
    finally:
        release_b.set()
        t.join(WAIT_S)
        engine.close()
        other.close()
    assert len(outcome) == 1 and isinstance(outcome[0], durably.StaleLease), outcome


def _terminate_owner_session(engine: durably.Engine, pg_url: str) -> str:
    """Kill the engine's owner-lock session as an operator would; returns the owner."""
    me = str(engine._leases.owner_now())  # holds the lock (a claim does this first)
    store = engine.store
    assert isinstance(store, PostgresStore) and store._owner_conn is not None
    assert store.owners_without_lock([me]) == set()
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (store._owner_conn.info.backend_pid,))
    _wait(lambda: store.owners_without_lock([me]) == {me}, "the lock to be free")
    return me


def test_a_lock_session_killed_while_idle_is_taken_again_before_the_next_claim(
    pg_url: str,
) -> None:
    """Killed before any run (the lease keeper has not started): the next claim takes the
    lock again, so its run is shown alive and is not stopped as if its lease were lost."""
    with durably.Engine(pg_url, lease_s=10.0, heartbeat_s=0.5) as engine:
        held: list[bool] = []

        @engine.workflow(name="wf")
        def wf(ctx: durably.Context) -> str:
            me = str(engine._leases.owner_now())
            held.append(ctx.step("held", lambda: not engine.store.owners_without_lock([me])))
            # Long enough for the keeper to beat while the run is driven.
            ctx.step("nap", lambda: time.sleep(2 * engine.heartbeat_s) or 1)
            return "done"

        _terminate_owner_session(engine, pg_url)
        assert engine.run(wf, run_id="r") == "done"
        assert held == [True]


def test_a_claim_after_the_lock_session_died_stops_the_runs_driven_then(pg_url: str) -> None:
    """The loss is noticed at the next claim too, not only at the keeper's next beat (a
    minute away here): runs driven while the lock was free stop, the new one runs."""
    engine = durably.Engine(pg_url, lease_s=180.0)
    in_b, release_b = threading.Event(), threading.Event()

    @engine.workflow(name="slow")
    def slow(ctx: durably.Context) -> str:
        ctx.step("b", lambda: in_b.set() or release_b.wait(WAIT_S))
        ctx.step("c", lambda: "c")
        return "done"

    @engine.workflow(name="quick")
    def quick(ctx: durably.Context) -> int:
        return int(ctx.step("one", lambda: 1))

    outcome: list[BaseException | str] = []
    t = threading.Thread(target=lambda: _drive(engine, slow, "r1", outcome))
    t.start()
    try:
        assert in_b.wait(WAIT_S)
        me = _terminate_owner_session(engine, pg_url)
        assert engine.run(quick, run_id="r2") == 1
        assert engine._attempts.active["r1"].core.lease_lost
        assert engine.store.owners_without_lock([me]) == set()  # held again
    finally:
        release_b.set()
        t.join(WAIT_S)
        engine.close()
    assert len(outcome) == 1 and isinstance(outcome[0], durably.StaleLease), outcome


def _drive(engine: durably.Engine, wf: Any, run_id: str, out: list[BaseException | str]) -> None:
    try:
        out.append(engine.run(wf, run_id=run_id))
    except BaseException as exc:
        out.append(exc)


def test_two_engines_of_one_process_both_hold_its_owner_lock(pg_url: str) -> None:
    """One process is one owner: a second engine on the same journal takes the same
    owner's lock on its own session. It must not wait for the first engine's session
    (forever: that session lives as long as the first engine)."""
    first, second = durably.Engine(pg_url), durably.Engine(pg_url)
    for eng in (first, second):

        @eng.workflow(name="wf")
        def wf(ctx: durably.Context) -> int:
            return int(ctx.step("one", lambda: 1))

    assert first.run("wf", run_id="r1") == 1
    out: list[BaseException | str] = []
    t = threading.Thread(target=_drive, args=(second, "wf", "r2", out), daemon=True)
    t.start()
    t.join(WAIT_S)
    hung = t.is_alive()
    if hung:  # free the blocked session, so the engines can close and the test ends
        store = first.store
        assert isinstance(store, PostgresStore) and store._owner_conn is not None
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_cancel_backend(pid) FROM pg_stat_activity"
                " WHERE %s = ANY(pg_blocking_pids(pid))",
                (store._owner_conn.info.backend_pid,),
            )
        t.join(WAIT_S)
    assert not hung and out == [1]
    me = str(first._leases.owner_now())
    first.close()
    # The process still shows alive: the second engine holds the lock too.
    assert second.store.owners_without_lock([me]) == set()
    second.close()


def test_the_lease_keeper_keeps_the_idle_lock_session_from_idle_timeouts(pg_url: str) -> None:
    """The lock session runs no query of its own: the keeper's ping at every beat is what
    keeps a server's idle_session_timeout (or a NAT's idle cut) from ending it, and with
    it every run the process drives."""
    url = pg_url + "%20-cidle_session_timeout%3D2000"  # 2 s, for this test's sessions
    with durably.Engine(url, lease_s=10.0, heartbeat_s=0.3) as engine:

        @engine.workflow(name="wf")
        def wf(ctx: durably.Context) -> str:
            for i in range(6):  # 3 s in all: past the idle timeout, many beats
                ctx.step(f"nap{i}", lambda: time.sleep(0.5) or 1)
            return "done"

        assert engine.run(wf, run_id="r") == "done"


def test_worker_warns_when_its_clock_is_off_the_databases(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    ahead = FakeClock(time.time() + 10 * CLOCK_SKEW_WARN_S)
    with durably.Engine(pg_url, clock=ahead) as engine:
        with caplog.at_level(logging.WARNING, logger="durably"):
            Worker(engine, poll_interval_s=0.01).run(max_runs=0)
        said = [r.getMessage() for r in caplog.records if "clock" in r.getMessage()]
        assert said and "off the database's" in said[0], said
        skew = check_clock(engine.store, ahead)
        assert skew is not None and skew > 5 * CLOCK_SKEW_WARN_S
    # A clock that agrees is not warned about.
    caplog.clear()
    with durably.Engine(pg_url) as engine, caplog.at_level(logging.WARNING, logger="durably"):
        skew = check_clock(engine.store, engine.clock)
        assert skew is not None and abs(skew) < CLOCK_SKEW_WARN_S
    assert not [r for r in caplog.records if "clock" in r.getMessage()]


def test_worker_checks_the_clock_again_periodically(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    ahead = FakeClock(time.time() + 10 * CLOCK_SKEW_WARN_S)
    with durably.Engine(pg_url, clock=ahead) as engine:
        worker = Worker(engine, poll_interval_s=0.01, clock_check_s=0.05)
        with caplog.at_level(logging.WARNING, logger="durably"):
            t = threading.Thread(target=worker.run)
            t.start()
            try:
                _wait(
                    lambda: (
                        sum("off the database's" in r.getMessage() for r in caplog.records) >= 3
                    ),
                    "three clock warnings",
                )
            finally:
                worker.stop()
                t.join(WAIT_S)


def test_the_lock_session_is_named_apart_from_the_pool(pg_url: str) -> None:
    # A script ending a pool's sessions by application_name (as an operator, or a test of
    # dropped connections, does) must not end the lock session too: losing that one stops
    # every run of the process.
    import uuid

    app = f"app-{uuid.uuid4().hex[:8]}"
    with durably.Engine(f"{pg_url}&application_name={app}") as engine:
        store = engine.store
        assert isinstance(store, PostgresStore)
        store.hold_owner(engine._leases.owner_now())
        with psycopg.connect(pg_url, autocommit=True) as admin:
            names = {
                row[0]
                for row in admin.execute(
                    "SELECT application_name FROM pg_stat_activity WHERE application_name LIKE %s",
                    (f"{app}%",),
                )
            }
        assert f"{app}-owner" in names
