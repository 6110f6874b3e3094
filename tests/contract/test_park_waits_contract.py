"""A park on several waits at once (``ctx.gather`` branches that each parked), on every
store: a signal of any waited name, or a decision of any request waited on, wakes the
run; one already there when it parks makes it due at once; every request's row is
written with the park."""

from __future__ import annotations

from typing import Any

from durably.approvals import ApprovalRequest, approval_digest, canonical_args
from durably.clock import FakeClock
from durably.events import APPROVAL_REQUESTED
from durably.store.base import Store

from .test_park_contract import ME, alive, claim_next, new_run, parked_events, sql

ARGS = {"amount": 20}
DIGEST = approval_digest("refund", ARGS)


def request(pos: str, now: float) -> ApprovalRequest:
    args = canonical_args("refund", ARGS)[len('["refund",') : -1]
    return ApprovalRequest(pos, "refund", args, DIGEST, now, None)


def park_on_signals(store: Store, run_id: str, names: tuple[str, ...], wake: float | None) -> Any:
    store.create_run(new_run(run_id))
    token = store.claim(run_id, ME, 30, 10, alive).fencing_token
    return store.park(
        run_id,
        token,
        [],
        kind="waits",
        park_reason="2 waits",
        wake_at=wake,
        wait_signals=names,
    )


def test_a_signal_of_any_waited_name_wakes_the_run(
    store: Store, store_url: str, clock: FakeClock
) -> None:
    later = clock.time() + 3600
    assert park_on_signals(store, "r1", ("a", "b"), later) == later
    assert sql(store_url, "SELECT wait_signal FROM runs") == [('["a", "b"]',)]
    store.send_signal("r1", "c", "null")  # a name it does not wait for
    assert claim_next(store) is None
    store.send_signal("r1", "b", "null")  # the second name wakes it
    taken = claim_next(store)
    assert taken is not None and taken.run_id == "r1"


def test_a_signal_of_any_waited_name_sent_first_makes_the_park_due_at_once(
    store: Store, clock: FakeClock
) -> None:
    now = clock.time()
    store.create_run(new_run("early"))
    store.send_signal("early", "b", "null")
    token = store.claim("early", ME, 30, 10, alive).fencing_token
    woke = store.park(
        "early", token, [], kind="waits", park_reason="2", wake_at=None, wait_signals=("a", "b")
    )
    assert woke == now
    assert parked_events(store, "early")[0]["kind"] == "waits"


def test_every_request_gets_its_row_and_deciding_any_wakes_the_run(
    store: Store, clock: FakeClock
) -> None:
    now = clock.time()
    store.create_run(new_run())
    token = store.claim("r1", ME, 30, 10, alive).fencing_token
    reqs = [request("0.0.0", now), request("0.1.0", now)]
    woke = store.park(
        "r1", token, [], kind="waits", park_reason="2 waits", wake_at=None, approvals=reqs
    )
    assert woke is None
    assert [r.request_id for r in store.pending_approvals("r1")] == ["0.0.0", "0.1.0"]
    page = store.read_events("r1", 0, 100)
    assert page is not None
    assert [e.position for e in page.events if e.kind == APPROVAL_REQUESTED] == ["0.0.0", "0.1.0"]
    assert claim_next(store) is None
    clock.advance(5)
    store.decide_approval(
        "r1", "0.1.0", digest=DIGEST, outcome="approved", by="ana", note=None
    )  # the second request
    taken = claim_next(store)
    assert taken is not None and taken.run_id == "r1"
    # Parked again on both (the replay's park): one decided already makes it due at once.
    token = taken.fencing_token
    woke = store.park(
        "r1", token, [], kind="waits", park_reason="2 waits", wake_at=None, approvals=reqs
    )
    assert woke == clock.time()
    assert [r.request_id for r in store.pending_approvals("r1")] == ["0.0.0"]
