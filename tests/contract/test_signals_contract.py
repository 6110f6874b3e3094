"""The signal store calls (send_signal, take_signal) on every store."""

from __future__ import annotations

import json

import pytest

from durably.clock import FakeClock
from durably.errors import LeaseLost, RunFinished, RunNotFound
from durably.events import SIGNAL_RECEIVED
from durably.history import CANCELLED, COMPLETED, CONTINUED, FAILED_RUN
from durably.store.base import Store

from .test_store_contract import ME, alive, new_run


def test_send_numbers_signals_per_run_and_writes_an_event_without_data(store: Store) -> None:
    store.create_run(new_run("r1"))
    store.create_run(new_run("r2"))
    assert store.send_signal("r1", "approve", '{"by":"ana"}') == 1
    assert store.send_signal("r1", "other", "null") == 2
    assert store.send_signal("r2", "approve", "1") == 1  # numbered per run
    page = store.read_events("r1", 0, 100)
    assert page is not None
    received = [e for e in page.events if e.kind == SIGNAL_RECEIVED]
    assert [e.data for e in received] == [
        {"name": "approve", "seq": 1},
        {"name": "other", "seq": 2},
    ]
    # The data may hold secrets: it never reaches the stream.
    assert all("ana" not in json.dumps(e.data) for e in page.events)


def test_send_to_an_unknown_run_raises_run_not_found(store: Store) -> None:
    with pytest.raises(RunNotFound, match="nothing was sent"):
        store.send_signal("nope", "approve", "null")


@pytest.mark.parametrize("status", [COMPLETED, FAILED_RUN, CANCELLED, CONTINUED])
def test_send_to_a_finished_run_raises_run_finished(store: Store, status: str) -> None:
    store.create_run(new_run())
    run = store.claim("r1", ME, 30, 10, alive)
    store.finish("r1", run.fencing_token, status, [])
    with pytest.raises(RunFinished, match=f"already {status}"):
        store.send_signal("r1", "approve", "null")
    page = store.read_events("r1", 0, 100)
    assert page is not None and all(e.kind != SIGNAL_RECEIVED for e in page.events)


def test_take_is_fifo_per_name_and_none_when_empty(store: Store) -> None:
    store.create_run(new_run())
    token = store.claim("r1", ME, 30, 10, alive).fencing_token
    assert store.take_signal("r1", token, "go", "0") is None
    store.send_signal("r1", "go", '"first"')
    store.send_signal("r1", "stop", '"other name"')
    store.send_signal("r1", "go", '"second"')
    assert store.take_signal("r1", token, "go", "1") == (1, '"first"')
    assert store.take_signal("r1", token, "go", "2") == (3, '"second"')
    assert store.take_signal("r1", token, "go", "3") is None
    assert store.take_signal("r1", token, "stop", "4") == (2, '"other name"')


def test_take_is_idempotent_per_consumer(store: Store) -> None:
    """A wait whose reply was lost (or whose process died before recording) asks again
    with the same consumer and gets the same signal, not the next one."""
    store.create_run(new_run())
    token = store.claim("r1", ME, 30, 10, alive).fencing_token
    store.send_signal("r1", "go", "1")
    store.send_signal("r1", "go", "2")
    assert store.take_signal("r1", token, "go", "5") == (1, "1")
    assert store.take_signal("r1", token, "go", "5") == (1, "1")
    # A new claim (a resumed run) asking at the same position gets it too.
    store.release("r1", token)
    token2 = store.claim("r1", ME, 30, 10, alive).fencing_token
    assert store.take_signal("r1", token2, "go", "5") == (1, "1")
    assert store.take_signal("r1", token2, "go", "6") == (2, "2")


def test_take_is_fenced(store: Store, clock: FakeClock) -> None:
    store.create_run(new_run())
    old = store.claim("r1", ME, 30, 10, alive).fencing_token
    store.send_signal("r1", "go", "1")
    clock.advance(31)
    new = store.claim("r1", ME, 30, 10, alive).fencing_token
    with pytest.raises(LeaseLost):
        store.take_signal("r1", old, "go", "0")
    # The stale taker consumed nothing: the new owner gets the signal.
    assert store.take_signal("r1", new, "go", "0") == (1, "1")


def test_signal_sent_while_queued_or_running_is_kept(store: Store) -> None:
    store.create_run(new_run())
    assert store.send_signal("r1", "go", '"early"') == 1  # before any claim
    token = store.claim("r1", ME, 30, 10, alive).fencing_token
    assert store.send_signal("r1", "go", '"while running"') == 2
    assert store.take_signal("r1", token, "go", "0") == (1, '"early"')
    assert store.take_signal("r1", token, "go", "1") == (2, '"while running"')


def _park_on(store: Store, token: int, name: str, wake_at: float | None) -> float | None:
    return store.park(
        "r1",
        token,
        [],
        kind="signal",
        park_reason=f"signal {name!r}",
        wake_at=wake_at,
        wait_signals=[name],
    )


@pytest.mark.parametrize("timeout_s", [None, 3600.0])
def test_a_signal_wakes_a_run_parked_on_its_name(
    store: Store, clock: FakeClock, timeout_s: float | None
) -> None:
    store.create_run(new_run())
    token = store.claim("r1", ME, 30, 10, alive).fencing_token
    parked_at = clock.time()
    deadline = None if timeout_s is None else parked_at + timeout_s
    assert _park_on(store, token, "go", deadline) == deadline
    served = {"wf": ["1"]}
    assert store.claim_next(ME, 30, 10, alive, served, ["default"]) is None  # not due
    clock.advance(5)
    store.send_signal("r1", "other", "null")  # another name: still parked, not due
    run = store.get_run("r1")
    assert run is not None and run.status == "parked" and run.wake_at == deadline
    store.send_signal("r1", "go", '"yes"')
    run = store.get_run("r1")
    # Due since it parked: due on any worker's clock, however far ahead the sender's runs.
    assert run is not None and run.status == "parked" and run.wake_at == parked_at
    taken = store.claim_next(ME, 30, 10, alive, served, ["default"])
    assert taken is not None and taken.run_id == "r1"
    assert store.take_signal("r1", taken.fencing_token, "go", "0") == (2, '"yes"')


def test_a_signal_sent_before_the_park_makes_the_park_due_at_once(
    store: Store, clock: FakeClock
) -> None:
    store.create_run(new_run())
    token = store.claim("r1", ME, 30, 10, alive).fencing_token
    store.send_signal("r1", "go", "1")  # the run is running: nothing to wake yet
    assert _park_on(store, token, "go", None) == clock.time()


def test_a_send_repeated_under_its_name_is_stored_once(store: Store) -> None:
    """The retry of a send whose commit outcome was unknown (a lost connection) names
    the same send: it returns the stored number, and no second signal exists."""
    store.create_run(new_run())
    assert store.send_signal("r1", "go", '"once"', "send-1") == 1
    assert store.send_signal("r1", "go", '"once"', "send-1") == 1
    assert store.send_signal("r1", "go", '"another"', "send-2") == 2
    token = store.claim("r1", ME, 30, 10, alive).fencing_token
    assert store.take_signal("r1", token, "go", "0") == (1, '"once"')
    assert store.take_signal("r1", token, "go", "1") == (2, '"another"')
    assert store.take_signal("r1", token, "go", "2") is None
    page = store.read_events("r1", 0, 100)
    assert page is not None
    assert [e.data["seq"] for e in page.events if e.kind == SIGNAL_RECEIVED] == [1, 2]
    # Finished since: the retry still returns what the first attempt stored.
    store.finish("r1", token, COMPLETED, [])
    assert store.send_signal("r1", "go", '"once"', "send-1") == 1
    with pytest.raises(RunFinished):
        store.send_signal("r1", "go", '"new"', "send-3")


def test_a_signal_taken_by_a_wait_that_was_renamed_goes_back(store: Store) -> None:
    """A process took signal 'go' for the wait at position 3 and died before recording
    it; the redeployed code waits for 'start' there. The 'go' signal must not stay taken
    by a wait that no longer exists: a later wait for 'go' gets it."""
    store.create_run(new_run())
    token = store.claim("r1", ME, 30, 10, alive).fencing_token
    store.send_signal("r1", "go", '"first"')
    assert store.take_signal("r1", token, "go", "3") == (1, '"first"')
    assert store.take_signal("r1", token, "start", "3") is None  # the renamed wait
    assert store.take_signal("r1", token, "go", "4") == (1, '"first"')
    assert store.take_signal("r1", token, "go", "4") == (1, '"first"')  # still idempotent
