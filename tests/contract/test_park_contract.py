"""The park store call, on every store: one fenced transaction that writes the records,
parks the run (no owner, no lease) and says when it wakes; a signal or a cancel that came
first makes it due at once. And the ``waiting`` record a timer leaves: a result replaces
it, nothing else does (except itself, for a retried write)."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from contextlib import closing
from typing import Any

import pytest

from durably.clock import FakeClock
from durably.errors import LeaseLost, StoreError
from durably.events import new_event
from durably.history import HALT, INTENT, OK, SLEEP, WAITING, StepRecord
from durably.store.base import NewRun, Owner, Store
from durably.store.open import open_store

ME = Owner("host-a", 100, "1")
DIGEST = hashlib.sha256(b"x").hexdigest()
SERVED = {"wf": frozenset({"1"})}


def alive(_: str) -> bool:
    return False


def dead(_: str) -> bool:
    return True


def new_run(run_id: str = "r1") -> NewRun:
    return NewRun(run_id, "wf", "1", None, "default", '{"args":[],"kwargs":{}}', DIGEST, 1)


def timer(pos: str, status: str, wake_at: float) -> StepRecord:
    return StepRecord(
        pos, SLEEP, "durably.sleep", DIGEST, status, json.dumps({"wake_at": wake_at}), None, None
    )


def sql(url: str, statement: str, *params: Any) -> list[tuple[Any, ...]]:
    """Run one statement on the journal behind ``url`` as an outside process would."""
    if url.startswith("sqlite:///"):
        with closing(sqlite3.connect(url[len("sqlite:///") :])) as conn:
            rows = conn.execute(statement, params).fetchall()
            conn.commit()
            return rows
    import psycopg

    with psycopg.connect(url, autocommit=True) as pg:
        cur = pg.execute(statement.replace("?", "%s"), params)  # type: ignore[call-overload]
        return cur.fetchall() if cur.description else []


def parked_events(store: Store, run_id: str) -> list[dict[str, Any]]:
    page = store.read_events(run_id, 0, 1000)
    assert page is not None
    return [e.data for e in page.events if e.kind == "run.parked"]


def claim_next(store: Store) -> Any:
    return store.claim_next(ME, 30, 10, alive, SERVED, ["default"])


def test_park_writes_its_records_gives_up_the_lease_and_wakes_when_due(
    store: Store, store_url: str, clock: FakeClock
) -> None:
    store.create_run(new_run())
    run = store.claim("r1", ME, 30, 10, alive)
    wake = clock.time() + 60
    woke = store.park(
        "r1",
        run.fencing_token,
        [timer("0", WAITING, wake)],
        kind="timer",
        park_reason="timer until later",
        wake_at=wake,
    )
    assert woke == wake
    parked = store.get_run("r1")
    assert parked is not None
    assert (parked.status, parked.owner, parked.lease_expires_at) == ("parked", None, None)
    assert (parked.park_reason, parked.wake_at) == ("timer until later", wake)
    assert parked.fencing_token == run.fencing_token  # a park raises no token
    assert [(r.position, r.status) for r in store.load_history("r1", 0)] == [("0", WAITING)]
    assert parked_events(store, "r1") == [
        {"kind": "timer", "reason": "timer until later", "wake_at": wake}
    ]
    assert claim_next(store) is None  # not due yet
    clock.advance(60)
    taken = claim_next(store)
    assert taken is not None and taken.run_id == "r1" and taken.status == "running"
    assert taken.park_reason is None and taken.wake_at is None
    assert taken.fencing_token == run.fencing_token + 1


def test_park_is_fenced(store: Store, clock: FakeClock) -> None:
    store.create_run(new_run())
    stale = store.claim("r1", ME, 30, 10, alive)
    store.claim("r1", ME, 30, 10, dead)  # another owner took the run over
    for records in ([timer("0", WAITING, clock.time() + 5)], []):
        with pytest.raises(LeaseLost):
            store.park(
                "r1",
                stale.fencing_token,
                records,
                kind="timer",
                park_reason="timer",
                wake_at=clock.time() + 5,
            )
    run = store.get_run("r1")
    assert run is not None and run.status == "running" and run.owner is not None
    assert store.load_history("r1", 0) == [] and parked_events(store, "r1") == []


def test_a_signal_sent_before_the_park_makes_it_due_at_once(
    store: Store, store_url: str, clock: FakeClock
) -> None:
    for run_id in ("pending", "consumed", "other"):
        store.create_run(new_run(run_id))
    now = clock.time()
    insert = "INSERT INTO signals (run_id, seq, name, data, sent_at, consumed_by) VALUES"
    sql(store_url, f"{insert} (?, 1, 'approve', 'null', ?, NULL)", "pending", now)
    sql(store_url, f"{insert} (?, 1, 'approve', 'null', ?, '3')", "consumed", now)
    sql(store_url, f"{insert} (?, 1, 'reject', 'null', ?, NULL)", "other", now)
    woke = {}
    for run_id in ("pending", "consumed", "other"):
        token = store.claim(run_id, ME, 30, 10, alive).fencing_token
        woke[run_id] = store.park(
            run_id,
            token,
            [],
            kind="signal",
            park_reason="signal approve",
            wake_at=None,
            wait_signals=["approve"],
        )
    # Only an unconsumed signal of the awaited name was sent before the park.
    assert woke == {"pending": now, "consumed": None, "other": None}
    rows = sql(store_url, "SELECT run_id, wait_signal, wake_at FROM runs ORDER BY run_id")
    assert rows == [
        ("consumed", '["approve"]', None),
        ("other", '["approve"]', None),
        ("pending", '["approve"]', now),
    ]
    assert parked_events(store, "pending")[0]["wake_at"] == now
    taken = claim_next(store)
    assert taken is not None and taken.run_id == "pending"
    assert sql(store_url, "SELECT wait_signal FROM runs WHERE run_id = 'pending'") == [(None,)]
    assert claim_next(store) is None  # the others wait for their signal


def test_a_cancel_asked_for_before_the_park_makes_it_due_at_once(
    store: Store, store_url: str, clock: FakeClock
) -> None:
    store.create_run(new_run())
    token = store.claim("r1", ME, 30, 10, alive).fencing_token
    sql(store_url, "UPDATE runs SET cancel_requested_at = ? WHERE run_id = 'r1'", clock.time())
    woke = store.park(
        "r1", token, [], kind="timer", park_reason="timer", wake_at=clock.time() + 3600
    )
    assert woke == clock.time()
    taken = claim_next(store)
    assert taken is not None and taken.run_id == "r1"


def test_a_waiting_record_gives_way_to_a_result_and_to_itself_only(
    store: Store, clock: FakeClock
) -> None:
    store.create_run(new_run())
    token = store.claim("r1", ME, 30, 10, alive).fencing_token
    waiting = timer("0", WAITING, 100.0)
    store.append("r1", token, [waiting])
    store.append("r1", token, [waiting])  # a write retried after an unknown outcome
    with pytest.raises(StoreError):
        store.append("r1", token, [timer("0", WAITING, 200.0)])  # another wake time
    intent = StepRecord("0", SLEEP, "durably.sleep", DIGEST, INTENT)
    with pytest.raises(StoreError):
        store.append("r1", token, [intent])
    assert store.load_history("r1", 0) == [waiting]
    done = timer("0", OK, 100.0).replace(finished_at=5.0)
    store.append("r1", token, [done])
    assert store.load_history("r1", 0) == [done]
    with pytest.raises(StoreError):
        store.append("r1", token, [waiting])  # a result is never replaced


def test_a_halt_marker_over_a_waiting_timer_is_stored_as_written(store: Store) -> None:
    """A cancel delivered at a timer records its marker at the timer's position: kind,
    name, digest and start are the marker's (the replay must find the halt there), and a
    write of it retried after an unknown outcome is accepted."""
    store.create_run(new_run())
    token = store.claim("r1", ME, 30, 10, alive).fencing_token
    store.append("r1", token, [timer("0", WAITING, 100.0).replace(started_at=1.0)])
    other = hashlib.sha256(b"halt").hexdigest()
    marker = StepRecord("0", HALT, "durably.cancel", other, OK, '{"reason":"dup"}', None, None)
    marker = marker.replace(started_at=7.0, finished_at=7.0)
    # With its event: PostgreSQL's one-statement append (a record and its events).
    store.append("r1", token, [marker], [new_event("user", "0", {}, 7.0, "halt:0")])
    store.append("r1", token, [marker])  # retried: the same record, accepted
    assert store.load_history("r1", 0) == [marker]


@pytest.mark.postgres
def test_a_park_due_at_once_wakes_waiting_workers(pg_url: str) -> None:
    clock = FakeClock()
    store, listener = open_store(pg_url, clock), open_store(pg_url, clock)
    try:
        store.create_run(new_run())
        token = store.claim("r1", ME, 30, 10, alive).fencing_token
        sql(pg_url, "UPDATE runs SET cancel_requested_at = 1 WHERE run_id = 'r1'")
        listener.wait_for_work(0.01)  # opens its LISTEN connection
        woken: list[float] = []

        def wait() -> None:
            started = time.monotonic()
            listener.wait_for_work(120)
            woken.append(time.monotonic() - started)

        t = threading.Thread(target=wait)
        t.start()
        time.sleep(0.3)
        store.park("r1", token, [], kind="timer", park_reason="timer", wake_at=clock.time() + 60)
        t.join(60)
        # The NOTIFY, not the 120 s timeout (that far apart so a loaded machine cannot blur
        # them: 5 s against 20 s was a timed assertion with little room).
        assert woken and woken[0] < 60
    finally:
        store.close()
        listener.close()
