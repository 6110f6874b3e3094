"""The cancel contract of every store: ``request_cancel`` and the flag ``append`` reports."""

from __future__ import annotations

import pytest

from durably.clock import FakeClock
from durably.errors import LeaseLost, RunFinished, RunNotFound
from durably.events import RUN_CANCEL_REQUESTED, RUN_CANCELLED, new_event
from durably.history import (
    BLOCKED,
    CANCELLED,
    COMPLETED,
    IN_DOUBT,
    INTENT,
    PARKED,
    QUARANTINED,
    QUEUED,
    RUNNING,
)
from durably.store.base import Store
from durably.store.runs import CANCEL_ERROR_TYPE

from .test_store_contract import ME, alive, new_run, rec


def kinds(store: Store, run_id: str) -> list[str]:
    page = store.read_events(run_id, 0, 1000)
    assert page is not None
    return [e.kind for e in page.events]


def test_unknown_run_raises_run_not_found(store: Store) -> None:
    with pytest.raises(RunNotFound, match="nope"):
        store.request_cancel("nope", "why")


def test_a_running_run_gets_the_flag_and_appends_report_it(store: Store, clock: FakeClock) -> None:
    store.create_run(new_run())
    token = store.claim("r1", ME, 30, 10, alive).fencing_token
    assert store.append("r1", token, [rec("0")]) is False
    clock.advance(1)
    run = store.request_cancel("r1", "duplicate alert")
    assert run.status == RUNNING and run.owner is not None  # a flag, not a status
    assert run.cancel_requested_at == clock.time() and run.cancel_reason == "duplicate alert"
    assert store.get_run("r1") == run
    # Every append path reports it: one record, a record with events, many records,
    # a record with blobs, events alone, and a write retried after an unknown outcome.
    ev = new_event("user", "1", {"kind": "k", "data": 1}, clock.time(), "u:1")
    assert store.append("r1", token, [rec("1")]) is True
    assert store.append("r1", token, [rec("2")], [ev]) is True
    assert store.append("r1", token, [rec("3"), rec("4")]) is True
    blob = rec("5").replace(blobs=(("d" * 64, '"b"'),))
    assert store.append("r1", token, [blob]) is True
    later = new_event("user", "6", {"kind": "k", "data": 2}, clock.time(), "u:2")
    assert store.append("r1", token, [], [later]) is True
    assert store.append("r1", token, [rec("4")]) is True  # already stored: success
    # A stale token is still refused, flag or not.
    with pytest.raises(LeaseLost):
        store.append("r1", token + 1, [rec("7")])
    assert kinds(store, "r1").count(RUN_CANCEL_REQUESTED) == 1


def test_a_second_cancel_changes_nothing_and_the_first_reason_stays(
    store: Store, clock: FakeClock
) -> None:
    store.create_run(new_run())
    store.claim("r1", ME, 30, 10, alive)
    first = store.request_cancel("r1", "first")
    clock.advance(5)
    again = store.request_cancel("r1", "second")
    assert again == first and again.cancel_reason == "first"
    assert kinds(store, "r1").count(RUN_CANCEL_REQUESTED) == 1


def test_a_cancel_after_a_retry_cleared_the_first_is_its_own_event(
    store: Store, clock: FakeClock
) -> None:
    """A retry clears the cancel flag (the retry is the later decision); a cancel asked
    for after it is a new request, and the stream says so with its own reason."""
    store.create_run(new_run())
    token = store.claim("r1", ME, 30, 10, alive).fencing_token
    store.append("r1", token, [rec("0")])
    store.request_cancel("r1", "first")
    store.finish("r1", token, "failed", [], error_type="ValueError", error_message="x")
    store.requeue("r1", ("failed",))
    assert store.get_run("r1").cancel_requested_at is None  # type: ignore[union-attr]
    store.claim("r1", ME, 30, 10, alive)
    run = store.request_cancel("r1", "second")  # the same clock time: still its own
    assert run.cancel_reason == "second"
    page = store.read_events("r1", 0, 1000)
    assert page is not None
    asked = [e.data.get("reason") for e in page.events if e.kind == RUN_CANCEL_REQUESTED]
    assert asked == ["first", "second"]
    # Asked again while the flag is set: nothing new.
    store.request_cancel("r1", "third")
    assert kinds(store, "r1").count(RUN_CANCEL_REQUESTED) == 2


def test_a_queued_run_that_never_ran_ends_at_once(store: Store, clock: FakeClock) -> None:
    store.create_run(new_run())
    run = store.request_cancel("r1", None)
    assert run.status == CANCELLED and run.terminal
    assert run.error_type == CANCEL_ERROR_TYPE and run.error_message is None
    assert run.finished_at == clock.time() and run.owner is None
    assert run.fencing_token == 1  # anything that believed it held the run is fenced out
    assert "nothing ran" in (run.park_reason or "")
    assert kinds(store, "r1")[-2:] == [RUN_CANCEL_REQUESTED, RUN_CANCELLED]
    page = store.read_events("r1", 0, 100)
    assert page is not None and page.finished
    assert page.events[-1].data.get("reason") is None  # none given
    # Cancelled already: returned unchanged, no new event.
    assert store.request_cancel("r1", "later") == run
    assert kinds(store, "r1").count(RUN_CANCELLED) == 1


def test_a_queued_run_with_history_gets_the_flag(store: Store) -> None:
    """Queued with records (a retried run): it replays and unwinds when claimed."""
    store.create_run(new_run())
    token = store.claim("r1", ME, 30, 10, alive).fencing_token
    store.append("r1", token, [rec("0")])
    store.finish("r1", token, "failed", [], error_type="ValueError", error_message="x")
    store.requeue("r1", ("failed",))
    run = store.request_cancel("r1", "stop")
    assert run.status == QUEUED and run.cancel_reason == "stop"
    claimed = store.claim("r1", ME, 30, 10, alive)
    assert claimed.cancel_requested_at is not None and claimed.cancel_reason == "stop"


@pytest.mark.parametrize("stuck", [BLOCKED, IN_DOUBT, QUARANTINED])
def test_a_run_waiting_for_a_person_ends_at_once(store: Store, stuck: str) -> None:
    store.create_run(new_run())
    token = store.claim("r1", ME, 30, 10, alive).fencing_token
    store.append("r1", token, [rec("0", INTENT, None)])
    store.release("r1", token, stuck, "why it is stuck")
    run = store.request_cancel("r1", "give up")
    assert run.status == CANCELLED and run.error_message == "give up"
    assert f"cancelled while {stuck}" in (run.park_reason or "")
    assert "did not run" in (run.park_reason or "")
    with pytest.raises(RunFinished):
        store.claim("r1", ME, 30, 10, alive)


def test_a_parked_run_wakes_now(store: Store, clock: FakeClock) -> None:
    store.create_run(new_run())
    token = store.claim("r1", ME, 30, 10, alive).fencing_token
    parked_at = clock.time()
    store.release("r1", token, PARKED, "timer", wake_at=parked_at + 3600)
    served = {"wf": ["1"]}
    assert store.claim_next(ME, 30, 10, alive, served, ["default"]) is None
    clock.advance(1)
    run = store.request_cancel("r1", "stop waiting")
    # Due since it parked: due on any worker's clock, however far ahead the canceller's.
    assert run.status == PARKED and run.wake_at == parked_at
    claimed = store.claim_next(ME, 30, 10, alive, served, ["default"])
    assert claimed is not None and claimed.run_id == "r1"
    assert claimed.cancel_reason == "stop waiting"


def test_a_finished_run_raises_run_finished(store: Store) -> None:
    store.create_run(new_run())
    token = store.claim("r1", ME, 30, 10, alive).fencing_token
    store.finish("r1", token, COMPLETED, [], outcome="1")
    with pytest.raises(RunFinished, match="already finished"):
        store.request_cancel("r1", "too late")
    assert store.get_run("r1").cancel_requested_at is None  # type: ignore[union-attr]


def test_a_halt_marker_takes_a_waiting_position_whole(store: Store, clock: FakeClock) -> None:
    """A cancel reaching a timer whose wait is in progress records its halt there: the
    position becomes the halt (kind, name, digest, output), so a replay raises it."""
    from durably.history import HALT, SLEEP, WAITING, StepRecord

    store.create_run(new_run())
    token = store.claim("r1", ME, 30, 10, alive).fencing_token
    waiting = StepRecord("0", SLEEP, "durably.sleep", "a" * 64, WAITING, '{"wake_at":9}', None)
    store.append("r1", token, [waiting])
    halt = StepRecord("0", HALT, "durably.cancel", "b" * 64, "ok", '{"reason":null}', None)
    halt = halt.replace(started_at=5.0, finished_at=5.0)
    store.finish("r1", token, CANCELLED, [halt], error_type=CANCEL_ERROR_TYPE)
    run = store.get_run("r1")
    assert run is not None
    assert store.load_history("r1", run.generation) == [halt]
