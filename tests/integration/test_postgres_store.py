"""PostgreSQL-only behaviour of the store: concurrency, lost connections, migrations.

The shared semantics are in ``tests/contract``; these tests cover what only a server with
many clients can show.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

import durably
from durably.clock import FakeClock
from durably.errors import (
    NotADurablyDatabase,
    RunLeased,
    SchemaTooNew,
    StoreError,
)
from durably.events import new_event
from durably.history import COMPLETED, INTENT, OK, STEP, StepRecord
from durably.store.base import NewRun, Owner, Served
from durably.store.postgres import PostgresStore
from durably.store.sqlfiles import migrations

pytestmark = pytest.mark.postgres

DIGEST = hashlib.sha256(b"x").hexdigest()
THREADS = 8


def alive(_: str) -> bool:
    return False


def dead(_: str) -> bool:
    return True


def new_run(run_id: str = "r1") -> NewRun:
    return NewRun(run_id, "wf", "1", None, "default", '{"args":[],"kwargs":{}}', DIGEST, 1)


def rec(pos: str, status: str = OK) -> StepRecord:
    return StepRecord(
        pos,
        STEP,
        f"s{pos}",
        DIGEST,
        status,
        '"v"' if status == OK else None,
        None,
        None,
        1,
        1.0,
        2.0,
    )


def owner(i: int) -> Owner:
    return Owner(f"host-{i}", 1000 + i, "1")


def _claim_from_threads(store: PostgresStore, owner_dead: Any) -> list[Any]:
    """Claim run r1 from THREADS threads released at once; each result or exception."""
    barrier = threading.Barrier(THREADS)
    results: list[Any] = [None] * THREADS

    def worker(i: int) -> None:
        barrier.wait()
        try:
            results[i] = store.claim("r1", owner(i), 30, 100, owner_dead)
        except Exception as exc:  # collected and asserted on below
            results[i] = exc

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return results


def test_concurrent_claims_one_winner_while_lease_is_live(pg_url: str) -> None:
    store = PostgresStore(pg_url, FakeClock(), pool_max=THREADS)
    try:
        store.create_run(new_run())
        results = _claim_from_threads(store, alive)
        kinds = Counter(type(r).__name__ for r in results)
        assert kinds == {"RunRecord": 1, "RunLeased": THREADS - 1}, results
        winner = next(r for r in results if not isinstance(r, Exception))
        run = store.get_run("r1")
        assert run is not None and run.fencing_token == winner.fencing_token == 1
        assert run.owner == winner.owner
    finally:
        store.close()


def test_concurrent_takeovers_get_distinct_tokens(pg_url: str) -> None:
    store = PostgresStore(pg_url, FakeClock(), pool_max=THREADS)
    try:
        store.create_run(new_run())
        results = _claim_from_threads(store, dead)  # every claim may take over
        tokens = sorted(r.fencing_token for r in results)
        assert tokens == list(range(1, THREADS + 1))
        run = store.get_run("r1")
        assert run is not None and run.fencing_token == THREADS and run.starts == THREADS
    finally:
        store.close()


def test_claim_waits_for_an_in_flight_append_then_fences_it(pg_url: str) -> None:
    """A claim and an append of the old owner never interleave: the append holds the row."""
    store = PostgresStore(pg_url, FakeClock(), pool_max=4)
    try:
        store.create_run(new_run())
        token = store.claim("r1", owner(0), 30, 100, alive).fencing_token
        with psycopg.connect(pg_url) as held:  # an append's transaction, left open
            held.execute("SELECT 1 FROM runs WHERE run_id = 'r1' FOR KEY SHARE")
            done = threading.Event()

            def take_over() -> None:
                store.claim("r1", owner(1), 30, 100, dead)
                done.set()

            taker = threading.Thread(target=take_over)
            taker.start()
            assert not done.wait(0.3), "the claim did not wait for the open append"
            held.commit()
            taker.join(10)
        assert done.is_set()
        with pytest.raises(durably.errors.LeaseLost):
            store.append("r1", token, [rec("0")])
    finally:
        store.close()


def _slow_inserts_at(url: str, position: str, sleep_s: float) -> None:
    """Make inserts of ``position`` into ``steps`` sleep inside their statement: a wide,
    deterministic window in the middle of a real append (after its row lock is taken)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            f"""
            CREATE FUNCTION slow_steps() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
              IF NEW.position = '{position}' THEN PERFORM pg_sleep({sleep_s}); END IF;
              RETURN NEW;
            END $$;
            CREATE TRIGGER slow_steps BEFORE INSERT ON steps
              FOR EACH ROW EXECUTE FUNCTION slow_steps();
            """
        )


def _sleeping(url: str, app: str) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
            " AND wait_event = 'PgSleep'",
            (app,),
        ).fetchone()
    return row is not None and row[0] > 0


def test_a_real_claim_racing_a_real_append_never_loses_the_append(pg_url: str) -> None:
    """The old owner's append is inside its statement when another process's claim
    arrives (no lock taken by hand: both are the store's own calls, on separate
    connections). The claim must wait for the append, so the new owner's history holds
    it; or the append must be refused. An append that succeeds but is missing from the
    history the new owner loaded would be replayed over: a result lost or run twice."""
    import uuid

    app = f"durably-append-{uuid.uuid4().hex[:8]}"
    old = PostgresStore(f"{pg_url}&application_name={app}", FakeClock())
    new = PostgresStore(pg_url, FakeClock())
    try:
        old.create_run(new_run())
        token = old.claim("r1", owner(0), 30, 100, alive).fencing_token
        _slow_inserts_at(pg_url, "7", 1.5)
        appended: list[BaseException | None] = []

        def append() -> None:
            try:
                old.append("r1", token, [rec("7")])
                appended.append(None)
            except durably.errors.LeaseLost as exc:
                appended.append(exc)

        appender = threading.Thread(target=append)
        appender.start()
        deadline = time.monotonic() + 30
        while not _sleeping(pg_url, app):
            assert time.monotonic() < deadline, "the append never reached its insert"
            time.sleep(0.02)
        claimed = new.claim("r1", owner(1), 30, 100, dead)  # the old owner looks dead
        history = {r.position for r in new.load_history("r1", claimed.generation)}
        appender.join(30)
        assert claimed.fencing_token == token + 1 and len(appended) == 1
        if appended[0] is None:
            assert "7" in history, "an append landed after the claim that fenced it"
        else:
            assert "7" not in history
    finally:
        old.close()
        new.close()


def _backend_pids(store: PostgresStore) -> list[int]:
    with store._pool.connection() as conn:
        return [conn.info.backend_pid]


def _terminate(url: str, pid: int) -> None:
    with psycopg.connect(url, autocommit=True) as admin:
        assert admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() == (True,)


def test_terminated_connection_between_operations_loses_nothing(pg_url: str) -> None:
    store = PostgresStore(pg_url, FakeClock(), pool_min=1, pool_max=1)
    try:
        store.create_run(new_run())
        token = store.claim("r1", owner(0), 30, 100, alive).fencing_token
        store.append("r1", token, [rec("0")])
        ops: list[Callable[[], object]] = [
            lambda: store.append("r1", token, [rec("1")]),
            lambda: store.append("r1", token, [rec("2", INTENT), rec("3")]),
            lambda: store.renew("r1", token, 30),
            lambda: store.load_history("r1", 0),
            lambda: store.finish("r1", token, COMPLETED, [rec("2")], outcome='"done"'),
        ]
        for i, op in enumerate(ops):
            (pid,) = _backend_pids(store)
            _terminate(pg_url, pid)
            op()
            assert _backend_pids(store) != [pid], f"operation {i} kept a dead connection"
        history = {r.position: r.status for r in store.load_history("r1", 0)}
        assert history == {"0": OK, "1": OK, "2": OK, "3": OK}
        run = store.get_run("r1")
        assert run is not None and run.status == COMPLETED and run.outcome == '"done"'
    finally:
        store.close()


def test_append_whose_commit_outcome_is_unknown_is_retried_safely(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The connection dies right after the append committed: the retry must succeed, on
    the one-statement path of a record alone and of a record with its events."""
    store = PostgresStore(pg_url, FakeClock(), pool_min=1, pool_max=1)
    try:
        store.create_run(new_run())
        token = store.claim("r1", owner(0), 30, 100, alive).fencing_token
        original = store._call
        attempts: list[bool] = []

        def call_then_die(op: Any, durable: bool = True) -> Any:
            def dying(conn: Any, retried: bool) -> Any:
                out = op(conn, retried)
                attempts.append(retried)
                if len(attempts) == 1:  # the autocommit insert is durable; lose the reply
                    conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")
                return out

            return original(dying, durable)

        monkeypatch.setattr(store, "_call", call_then_die)
        done = new_event("step.completed", "1", {"name": "s1"}, 1.0, "t:done:1")
        for records, events in (([rec("0")], []), ([rec("1")], [done])):
            attempts.clear()
            assert store.append("r1", token, records, events) is False
            # Committed, then the reply lost; run again (refused: the record is there);
            # the transaction finds the stored record equal to this one: success.
            assert attempts == [False, True, False]
        assert [r.position for r in store.load_history("r1", 0)] == ["0", "1"]
        page = store.read_events("r1", 0, 100)
        assert page is not None
        assert [e.kind for e in page.events].count("step.completed") == 1
        # A different record at the position is still a refused overwrite.
        monkeypatch.setattr(store, "_call", original)
        with pytest.raises(StoreError, match="never overwritten"):
            store.append("r1", token, [rec("0").replace(output='"other"')])
    finally:
        store.close()


_MIGRATE = textwrap.dedent("""
    import sys, time
    from durably.clock import SystemClock
    from durably.store.postgres import PostgresStore
    start = float(sys.argv[2])
    time.sleep(max(0.0, start - time.time()))
    PostgresStore(sys.argv[1], SystemClock()).close()
""")


def test_concurrent_migrations_from_processes(pg_url: str) -> None:
    start = time.time() + 1.5  # all processes import first, then migrate at once
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _MIGRATE, pg_url, str(start)], stderr=subprocess.PIPE, text=True
        )
        for _ in range(4)
    ]
    errors = [p.communicate(timeout=60)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, errors
    with psycopg.connect(pg_url) as conn:
        meta: dict[str, str] = dict(conn.execute("SELECT key, value FROM durably_meta").fetchall())
    assert meta == {"app": "durably", "schema_version": str(migrations("postgres")[-1].version)}


def test_refuses_foreign_tables_and_newer_schema(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE runs (id int)")
        with pytest.raises(NotADurablyDatabase, match="did not create"):
            PostgresStore(pg_url, FakeClock())
        conn.execute("DROP TABLE runs")
        conn.execute("CREATE TABLE unrelated (id int)")  # a shared schema is normal
        PostgresStore(pg_url, FakeClock()).close()
        conn.execute("UPDATE durably_meta SET value = '999' WHERE key = 'schema_version'")
        with pytest.raises(SchemaTooNew, match="upgrade durably"):
            PostgresStore(pg_url, FakeClock())


def test_unreachable_server_names_the_host() -> None:
    with pytest.raises(StoreError, match=r"cannot connect to PostgreSQL 127\.0\.0\.1:1/"):
        PostgresStore("postgresql://nobody@127.0.0.1:1/db", FakeClock(), connect_timeout_s=1)


def test_engine_end_to_end_replays_without_executing(pg_url: str) -> None:
    calls: Counter[str] = Counter()
    crash = {"at": "c"}

    def work(name: str) -> str:
        calls[name] += 1
        if crash["at"] == name:
            raise KeyboardInterrupt  # a "crash": not an Exception, so nothing is recorded
        return name.upper()

    engine = durably.Engine(pg_url)
    try:

        @engine.workflow(name="e2e")
        def flow(ctx: durably.Context, prefix: str) -> str:
            parts = [ctx.step(n, work, n) for n in ("a", "b", "c", "d")]
            return prefix + "".join(parts)

        with pytest.raises(KeyboardInterrupt):
            engine.run(flow, "x-", run_id="e2e-1")
        assert calls == {"a": 1, "b": 1, "c": 1}
        crash["at"] = ""
        # Resume: a and b replay from the journal; c and d run live.
        assert engine.run(flow, "x-", run_id="e2e-1") == "x-ABCD"
        assert calls == {"a": 1, "b": 1, "c": 2, "d": 1}
        # A finished run returns its recorded outcome and executes nothing.
        assert engine.run(flow, "x-", run_id="e2e-1") == "x-ABCD"
        assert calls == {"a": 1, "b": 1, "c": 2, "d": 1}
        run = engine.store.get_run("e2e-1")
        assert run is not None and run.status == COMPLETED
        assert len(engine.store.load_history("e2e-1", 0)) == 4
    finally:
        engine.close()
    # A second engine (a new process would do the same) sees the same journal.
    other = durably.Engine(pg_url)
    try:
        other.workflow(name="e2e")(lambda ctx, prefix: "never runs")
        assert other.run("e2e", "x-", run_id="e2e-1") == "x-ABCD"
    finally:
        other.close()


def test_rejects_a_claim_from_a_live_owner_in_another_store(pg_url: str) -> None:
    """Two stores (two processes' pools) see one lease."""
    a = PostgresStore(pg_url, FakeClock())
    b = PostgresStore(pg_url, FakeClock())
    try:
        a.create_run(new_run())
        a.claim("r1", owner(0), 30, 100, alive)
        with pytest.raises(RunLeased):
            b.claim("r1", owner(1), 30, 100, alive)
    finally:
        a.close()
        b.close()


# -- fleet: claim_next, wait_for_work, requeue ------------------------------------------


def _new(
    run_id: str, workflow: str = "wf", version: str | None = "1", queue: str = "default"
) -> NewRun:
    return NewRun(run_id, workflow, version, None, queue, "{}", DIGEST, 1)


def test_claim_next_from_many_threads_takes_each_run_once(pg_url: str) -> None:
    clock = FakeClock()
    store = PostgresStore(pg_url, clock, pool_max=THREADS)
    try:
        for i in range(20):
            store.create_run(_new(f"r{i:02}"))
            clock.advance(1)
        taken: list[str] = []
        lock = threading.Lock()

        def worker(i: int) -> None:
            while (
                run := store.claim_next(owner(i), 30, 10, alive, {"wf": {"1"}}, ["default"])
            ) is not None:
                with lock:
                    taken.append(run.run_id)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert sorted(taken) == [f"r{i:02}" for i in range(20)]
    finally:
        store.close()


def test_claim_next_oldest_first_routes_versions_and_queues(pg_url: str) -> None:
    clock = FakeClock()
    store = PostgresStore(pg_url, clock)
    try:
        store.create_run(_new("old-v1", version="1"))
        clock.advance(1)
        store.create_run(_new("other-queue", queue="q2"))
        clock.advance(1)
        store.create_run(_new("new-v2", version="2"))
        clock.advance(1)
        store.create_run(_new("unserved", workflow="nope"))
        got = store.claim_next(owner(0), 30, 10, alive, {"wf": {"2"}}, ["default"])
        assert got is not None and got.run_id == "new-v2" and got.fencing_token == 1
        assert store.claim_next(owner(0), 30, 10, alive, {"wf": {None}}, ["default"]) is None
        got = store.claim_next(owner(0), 30, 10, alive, {"wf": {"1"}}, ["default"])
        assert got is not None and got.run_id == "old-v1"
        assert store.claim_next(owner(0), 30, 10, alive, {"wf": {"1"}}, ["default"]) is None
        got = store.claim_next(owner(0), 30, 10, alive, {"wf": {"1"}}, ["default", "q2"])
        assert got is not None and got.run_id == "other-queue"
    finally:
        store.close()


def test_claim_next_expired_parked_and_dead_owner_runs(pg_url: str) -> None:
    clock = FakeClock()
    store = PostgresStore(pg_url, clock)
    served: Served = {"wf": {"1"}}
    me = Owner("this-host", 1, "1")
    try:
        for run_id in ("expired", "parked", "dead"):
            store.create_run(_new(run_id))
        store.claim("expired", Owner("elsewhere", 9, "1"), 10, 10, alive)
        parked = store.claim("parked", me, 30, 10, alive)
        store.release("parked", parked.fencing_token, "parked", "timer", clock.time() + 20)
        store.claim("dead", Owner("this-host", 2, "1"), 60, 10, alive)
        assert store.claim_next(me, 30, 10, alive, served, ["default"]) is None
        got = store.claim_next(me, 30, 10, lambda o: o.endswith("|2|1"), served, ["default"])
        assert got is not None and got.run_id == "dead" and got.fencing_token == 2
        clock.advance(15)
        got = store.claim_next(me, 30, 10, alive, served, ["default"])
        assert got is not None and got.run_id == "expired"
        clock.advance(10)
        got = store.claim_next(me, 30, 10, alive, served, ["default"])
        assert got is not None and got.run_id == "parked" and got.status == "running"
    finally:
        store.close()


def test_queue_limit_holds_across_concurrent_workers(pg_url: str) -> None:
    store = PostgresStore(pg_url, FakeClock(), pool_max=THREADS)
    try:
        for i in range(10):
            store.create_run(_new(f"r{i}", queue="gpu"))
        results = []
        barrier = threading.Barrier(THREADS)

        def worker(i: int) -> None:
            barrier.wait()
            results.append(
                store.claim_next(owner(i), 30, 10, alive, {"wf": {"1"}}, ["gpu"], {"gpu": 2})
            )

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert sum(r is not None for r in results) == 2
    finally:
        store.close()


def test_wait_for_work_wakes_on_a_new_run(pg_url: str) -> None:
    waiter = PostgresStore(pg_url, FakeClock())
    other = PostgresStore(pg_url, FakeClock())
    try:
        waiter.wait_for_work(0.01)  # starts listening
        woke = threading.Event()

        def wait() -> None:
            waiter.wait_for_work(120)
            woke.set()

        t = threading.Thread(target=wait)
        t.start()
        time.sleep(0.2)
        assert not woke.is_set()
        other.create_run(_new("wake-up"))
        # Woken by the NOTIFY, long before the 120 s poll: a bound with room for a loaded
        # machine, where 5 s against a 20 s poll was a timed assertion with little margin.
        t.join(60)
        assert woke.is_set()
    finally:
        waiter.close()
        other.close()


def test_requeue_drops_or_resolves_intents(pg_url: str) -> None:
    store = PostgresStore(pg_url, FakeClock())
    try:
        store.create_run(new_run())
        token = store.claim("r1", owner(0), 30, 10, alive).fencing_token
        store.append("r1", token, [rec("0"), rec("1", INTENT)])
        store.release("r1", token, "in_doubt", park_reason="1")
        with pytest.raises(StoreError, match="no effect in doubt at position 0"):
            store.requeue("r1", ("in_doubt",), resolve=("0", '"x"'))
        run = store.requeue("r1", ("in_doubt",), resolve=("1", '"done"'))
        assert run.status == "queued" and run.fencing_token == token + 1
        assert {r.position: r.output for r in store.load_history("r1", 0)} == {
            "0": '"v"',
            "1": '"done"',
        }
        with pytest.raises(StoreError, match="is queued"):
            store.requeue("r1", ("in_doubt",))
        with pytest.raises(durably.errors.RunNotFound):
            store.requeue("nope", ("in_doubt",))
    finally:
        store.close()
