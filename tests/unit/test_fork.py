"""Fork safety of the engine and the journal stores, with real forked children.

Each test forks while another thread of the parent is inside a store call (or a run), then
uses the same objects in the child under a deadline: a lock inherited held, a connection
shared with the parent, or the parent's runs mistaken for the child's all show up here.
Also: caches keyed by step functions must not keep closures alive.
"""

from __future__ import annotations

import gc
import threading
import time
import uuid
import weakref
from pathlib import Path
from typing import Any

import pytest

import durably
from durably.store.sqlite import SQLiteStore
from tests.forking import GateClock, run_in_child

pytestmark = pytest.mark.filterwarnings(
    # Python 3.12+ warns about forking a process that has threads; forking one is the
    # point of these tests.
    "ignore:.*fork.*:DeprecationWarning"
)


def test_a_child_forked_inside_a_sqlite_store_call_does_not_deadlock(tmp_path: Path) -> None:
    clock = GateClock()
    store = SQLiteStore(f"sqlite:///{tmp_path / 'j.db'}", clock)
    holder = clock.hold_inside(lambda: store.renew("nobody", 1, 30))
    # The precondition: the other thread is inside the call, holding the store's lock.
    assert not store._lock.acquire(blocking=False)

    def child() -> None:
        assert store.get_run("nobody") is None
        assert store.renew("nobody", 1, 30) is False  # a write
        store.close()

    # The fork waits for the call in progress, which goes on a moment later.
    threading.Timer(0.3, clock.release).start()
    run_in_child(child)
    holder.join(30)
    assert store.list_runs() == []  # the parent's connection is untouched
    store.close()


def test_an_engine_forked_inside_a_store_call_runs_workflows_in_the_child(
    tmp_path: Path,
) -> None:
    clock = GateClock()
    engine = durably.Engine(f"sqlite:///{tmp_path / 'j.db'}", clock=clock)

    @engine.workflow(name="double")
    def double(ctx: durably.Context, x: int) -> int:
        return int(ctx.step("double", lambda: 2 * x))

    assert engine.run(double, 1, run_id="before") == 2
    holder = clock.hold_inside(lambda: engine.store.renew("nobody", 1, 30))

    def child() -> None:
        assert engine.run(double, 21, run_id="in-child") == 42
        engine.close()

    threading.Timer(0.3, clock.release).start()
    run_in_child(child)
    holder.join(30)
    assert engine.run(double, 5, run_id="after") == 10
    run = engine.store.get_run("in-child")
    assert run is not None and run.status == "completed"
    engine.close()


def test_a_forked_child_does_not_treat_the_parents_runs_as_its_own(tmp_path: Path) -> None:
    engine = durably.Engine(f"sqlite:///{tmp_path / 'j.db'}", lease_s=30)
    inside, go_on = threading.Event(), threading.Event()

    def wait_for_the_test() -> str:
        inside.set()
        assert go_on.wait(60)
        return "done"

    @engine.workflow(name="slow")
    def slow(ctx: durably.Context) -> str:
        return str(ctx.step("wait", wait_for_the_test))

    results: list[Any] = []
    runner = threading.Thread(target=lambda: results.append(engine.run(slow, run_id="p")))
    runner.start()
    assert inside.wait(60)

    def child() -> None:
        # The parent's run is not driven here: nothing to give back, no lease to release.
        assert engine.abandon_active() == []
        engine.close()

    run_in_child(child)
    run = engine.store.get_run("p")
    assert run is not None and run.owner is not None  # still the parent's lease
    go_on.set()
    runner.join(60)
    assert results == ["done"]
    engine.close()


@pytest.mark.postgres
def test_engine_close_in_a_child_leaves_the_parents_postgres_sessions(pg_url: str) -> None:
    import psycopg

    app = f"durably-fork-{uuid.uuid4().hex[:8]}"
    engine = durably.Engine(f"{pg_url}&application_name={app}", pool_min=2)

    @engine.workflow(name="one")
    def one(ctx: durably.Context) -> int:
        return int(ctx.step("one", lambda: 1))

    assert engine.run(one, run_id="before") == 1
    with psycopg.connect(pg_url, autocommit=True) as watcher:

        def sessions() -> set[int]:
            sql = "SELECT pid FROM pg_stat_activity WHERE application_name = %s"
            return {row[0] for row in watcher.execute(sql, (app,))}

        before = sessions()
        assert before, "the parent has pooled sessions"

        def child() -> None:
            engine.close()

        run_in_child(child)
        # A Terminate from the child ends a session within moments; give it time to show.
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            assert before <= sessions(), "the child ended the parent's sessions"
            time.sleep(0.1)
    assert engine.run(one, run_id="after") == 1
    engine.close()


def test_caches_keyed_by_step_functions_let_closures_go(tmp_path: Path) -> None:
    engine = durably.Engine(f"sqlite:///{tmp_path / 'j.db'}", clock=durably.FakeClock())
    refs: list[weakref.ref[Any]] = []

    class Payload:
        """Something big a closure captured."""

    @engine.workflow(name="closures")
    def closures(ctx: durably.Context, n: int) -> int:
        payload = Payload()

        def step() -> int:
            return n if payload else 0

        refs.append(weakref.ref(step))
        refs.append(weakref.ref(payload))
        return int(ctx.step("step", step))

    for i in range(3):
        assert engine.run(closures, i, run_id=f"r{i}") == i
    gc.collect()
    assert [r() for r in refs] == [None] * len(refs)
    engine.close()
