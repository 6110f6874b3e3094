"""``Store.append`` on a position already written, the same on every store.

The semantics a durable store owes a caller that cannot know whether its last write
committed (a connection that died at commit, an engine retrying a transient error): an
append is idempotent on what is already stored identically and a conflict on anything
different. Each part has its own identity: a record by its position and content, an event
by its dedupe key. So an identical record written again is success and changes nothing,
its events are stored unless stored already, and a different record at a recorded
position is refused with nothing of the append written (its events and blobs neither).

Before the store was written once, PostgreSQL's one-statement append (a record and its
events) dropped the events of an identical record silently, and PostgreSQL's empty append
did not check the token.
"""

from __future__ import annotations

import hashlib

import pytest

from durably.errors import LeaseLost, StoreError
from durably.events import NewEvent, new_event
from durably.history import FAILED, INTENT, OK, WAITING, StepRecord
from durably.store.base import Store

from .test_store_contract import ME, alive, new_run, rec

BLOB = hashlib.sha256(b'"late"').hexdigest()


def _event(dedupe: str) -> NewEvent:
    return new_event("step.completed", "0", {"name": "s0", "d": dedupe}, 1.0, dedupe)


def _dedupes(store: Store) -> list[object]:
    page = store.read_events("r1", 0, 100)
    assert page is not None
    return [e.data["d"] for e in page.events if e.kind == "step.completed"]


def _claimed(store: Store) -> int:
    store.create_run(new_run())
    return store.claim("r1", ME, 30, 10, alive).fencing_token


def _stored(status: str) -> StepRecord:
    if status == WAITING:
        return rec("0", OK).replace(status=WAITING, output="5.0")
    return rec("0", status)


@pytest.mark.parametrize("status", [OK, FAILED, WAITING, INTENT])
def test_an_identical_record_again_is_success_and_its_events_are_stored_once(
    store: Store, status: str
) -> None:
    token = _claimed(store)
    first = _stored(status)
    assert store.append("r1", token, [first]) is False
    # The same record with an event not stored yet (PostgreSQL: its one-statement path).
    assert store.append("r1", token, [first], [_event("late")]) is False
    assert _dedupes(store) == ["late"]
    # And again, as a retry after an unknown commit sends it: nothing is stored twice.
    assert store.append("r1", token, [first], [_event("late")]) is False
    # With a blob, and next to a new record (the transaction path of every store).
    with_blob = first.replace(blobs=((BLOB, '"late"'),))
    assert store.append("r1", token, [with_blob, rec("1")], [_event("later")]) is False
    assert _dedupes(store) == ["late", "later"]
    assert store.load_history("r1", 0) == [first, rec("1")]
    assert store.get_blobs([BLOB]) == {BLOB: '"late"'}


def test_an_identical_record_again_reports_a_cancel_asked_for(store: Store) -> None:
    token = _claimed(store)
    store.append("r1", token, [rec("0")])
    store.request_cancel("r1", "enough")
    assert store.append("r1", token, [rec("0")]) is True
    assert store.append("r1", token, [rec("0")], [_event("late")]) is True
    assert _dedupes(store) == ["late"]


@pytest.mark.parametrize(
    "other",
    [
        rec("0", OK, '"w"'),  # another value
        rec("0", OK).replace(attempts=2),  # the same value from another execution
        rec("0", FAILED),  # a failure over a result
        rec("0", INTENT),  # an intent over a result
    ],
    ids=["value", "attempts", "failure", "intent"],
)
def test_a_different_record_at_a_recorded_position_writes_nothing(
    store: Store, other: StepRecord
) -> None:
    token = _claimed(store)
    store.append("r1", token, [rec("0")])
    blob = other.replace(blobs=((BLOB, '"late"'),))
    for records, events in (
        ([other], []),
        ([other], [_event("late")]),
        ([blob], [_event("late")]),
        ([rec("1"), other], [_event("late")]),
    ):
        with pytest.raises(StoreError, match="already holds a result"):
            store.append("r1", token, records, events)
    assert store.load_history("r1", 0) == [rec("0")]
    assert _dedupes(store) == [] and store.get_blobs([BLOB]) == {}


def test_an_empty_append_is_a_fenced_cancel_check(store: Store) -> None:
    token = _claimed(store)
    assert store.append("r1", token, []) is False
    with pytest.raises(LeaseLost):
        store.append("r1", token - 1, [])
    store.request_cancel("r1", None)
    assert store.append("r1", token, []) is True
