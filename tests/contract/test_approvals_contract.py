"""The approval store calls (park with an approval, pending_approvals, get_approval,
decide_approval, approval_decision) on every store."""

from __future__ import annotations

import pytest

from durably.approvals import ApprovalRequest, approval_digest, canonical_args
from durably.clock import FakeClock
from durably.errors import (
    ApprovalAlreadyDecided,
    ApprovalMismatch,
    ApprovalNotFound,
    LeaseLost,
    RunFinished,
    RunNotFound,
)
from durably.events import APPROVAL_DECIDED, APPROVAL_REQUESTED
from durably.history import CANCELLED, PARKED, StepRecord
from durably.store.base import Store
from durably.store.open import open_store

from .test_store_contract import ME, OTHER, alive, dead, new_run

ARGS = {"amount": 20, "currency": "EUR", "note": "café ☕"}
DIGEST = approval_digest("refund", ARGS)


def request(pos: str = "1", expires_at: float | None = None, now: float = 0.0) -> ApprovalRequest:
    text = canonical_args("refund", ARGS)
    args = text[len('["refund",') : -1]
    return ApprovalRequest(pos, "refund", args, DIGEST, now, expires_at)


def waiting(pos: str = "1") -> StepRecord:
    return StepRecord(
        pos, "approval", "request_approval:refund", DIGEST, "waiting", "{}", started_at=1.0
    )


def park_on(
    store: Store,
    clock: FakeClock,
    run_id: str = "r1",
    expires_in: float | None = None,
    records: bool = True,
) -> tuple[int, float | None]:
    """Create (or claim again) the run and park it on request 1; (token, wake_at)."""
    store.create_run(new_run(run_id))
    token = store.claim(run_id, ME, 30, 10, dead).fencing_token
    now = clock.time()
    expires = None if expires_in is None else now + expires_in
    wake = store.park(
        run_id,
        token,
        [waiting()] if records else [],
        kind="approval",
        park_reason="approval 'refund'",
        wake_at=expires,
        approvals=[request(expires_at=expires, now=now)],
    )
    return token, wake


def kinds(store: Store, run_id: str = "r1") -> list[str]:
    page = store.read_events(run_id, 0, 1000)
    assert page is not None
    return [e.kind for e in page.events]


def test_park_writes_the_request_row_once_with_its_event(store: Store, clock: FakeClock) -> None:
    _, wake = park_on(store, clock, expires_in=3600)
    assert wake == clock.time() + 3600
    [row] = store.pending_approvals()
    assert (row.run_id, row.request_id, row.action, row.digest) == ("r1", "1", "refund", DIGEST)
    assert row.args == '{"amount":20,"currency":"EUR","note":"café ☕"}'
    assert row.expires_at == clock.time() + 3600 and row.outcome is None
    assert store.get_approval("r1", "1") == row
    assert store.get_approval("r1", "2") is None
    # Parked again on the same request (a replay): the row stays, no second event.
    clock.advance(10)
    park_on(store, clock, expires_in=3600, records=False)
    assert store.pending_approvals() == [row]
    assert kinds(store).count(APPROVAL_REQUESTED) == 1
    assert store.get_run("r1").status == PARKED  # type: ignore[union-attr]


def test_pending_lists_oldest_first_filters_by_run_and_skips_finished_runs(
    store: Store, clock: FakeClock
) -> None:
    park_on(store, clock, "r1")
    clock.advance(1)
    park_on(store, clock, "r2")
    clock.advance(1)
    park_on(store, clock, "r3")
    assert [r.run_id for r in store.pending_approvals()] == ["r1", "r2", "r3"]
    assert [r.run_id for r in store.pending_approvals("r2")] == ["r2"]
    assert [r.run_id for r in store.pending_approvals(limit=2)] == ["r1", "r2"]
    token = store.claim("r3", ME, 30, 10, dead).fencing_token
    store.finish("r3", token, CANCELLED, [])
    assert [r.run_id for r in store.pending_approvals()] == ["r1", "r2"]


def test_wrong_digest_is_refused_and_nothing_changes(store: Store, clock: FakeClock) -> None:
    park_on(store, clock)
    before = (store.get_approval("r1", "1"), store.get_run("r1"), kinds(store))
    for wrong in ("0" * 64, DIGEST[:12], approval_digest("refund", {**ARGS, "amount": 2000})):
        with pytest.raises(ApprovalMismatch, match="nothing changed"):
            store.decide_approval("r1", "1", digest=wrong, outcome="approved", by="ana", note=None)
    assert (store.get_approval("r1", "1"), store.get_run("r1"), kinds(store)) == before


def test_right_digest_decides_once_and_wakes_the_parked_run(store: Store, clock: FakeClock) -> None:
    park_on(store, clock, expires_in=3600)
    clock.advance(5)
    row = store.decide_approval("r1", "1", digest=DIGEST, outcome="approved", by="ana", note="fine")
    assert (row.outcome, row.by, row.note, row.decided_at) == (
        "approved",
        "ana",
        "fine",
        clock.time(),
    )
    assert store.get_approval("r1", "1") == row
    assert store.pending_approvals() == []
    run = store.get_run("r1")
    # Due since it parked (5 s ago): due on any worker's clock (see the next test).
    assert run is not None and run.status == PARKED and run.wake_at == clock.time() - 5
    assert kinds(store)[-1] == APPROVAL_DECIDED
    # A worker claims it now: it is due.
    claimed = store.claim_next(ME, 30, 10, alive, {"wf": {"1"}}, ["default"])
    assert claimed is not None and claimed.run_id == "r1"
    clock.advance(5)
    with pytest.raises(ApprovalAlreadyDecided, match=r"already approved \(by 'ana'\)") as err:
        store.decide_approval("r1", "1", digest=DIGEST, outcome="rejected", by="bob", note="x")
    assert (err.value.outcome, err.value.by, err.value.decided_at) == (
        "approved",
        "ana",
        row.decided_at,
    )
    assert store.get_approval("r1", "1") == row


def test_a_decision_on_a_clock_running_ahead_wakes_the_run_when_it_parked(
    store: Store, clock: FakeClock, store_url: str
) -> None:
    """The decider's machine runs an hour ahead of the workers': the run is due on the
    workers' clock at once (by the time it parked), not an hour later; a decider whose
    clock runs behind makes it due at the decision, as before."""
    parked_at = clock.time()
    park_on(store, clock, expires_in=7200)
    ahead = open_store(store_url, FakeClock(parked_at + 3600))
    try:
        ahead.decide_approval("r1", "1", digest=DIGEST, outcome="approved", by="ana", note=None)
    finally:
        ahead.close()
    run = store.get_run("r1")
    assert run is not None and run.status == PARKED and run.wake_at == parked_at
    clock.advance(1)
    claimed = store.claim_next(ME, 30, 10, alive, {"wf": {"1"}}, ["default"])
    assert claimed is not None and claimed.run_id == "r1"
    # A request parked again and decided by a clock behind the park: due at the decision.
    park_on(store, clock, "r2", expires_in=7200)
    behind_at = clock.time() - 60
    behind = open_store(store_url, FakeClock(behind_at))
    try:
        behind.decide_approval("r2", "1", digest=DIGEST, outcome="rejected", by=None, note=None)
    finally:
        behind.close()
    run = store.get_run("r2")
    assert run is not None and run.wake_at == behind_at


def test_decision_before_the_park_wakes_the_run_at_once(store: Store, clock: FakeClock) -> None:
    # Parked once (the row exists), claimed again, and decided while it runs: its next
    # park on the same request must not sleep until the expiry.
    park_on(store, clock, expires_in=3600)
    token = store.claim("r1", ME, 30, 10, dead).fencing_token
    store.decide_approval("r1", "1", digest=DIGEST, outcome="rejected", by=None, note="no")
    wake = store.park(
        "r1",
        token,
        [],
        kind="approval",
        park_reason="approval 'refund'",
        wake_at=clock.time() + 3600,
        approvals=[request(expires_at=clock.time() + 3600)],
    )
    assert wake == clock.time()


def test_unknown_run_request_and_finished_run(store: Store, clock: FakeClock) -> None:
    with pytest.raises(RunNotFound, match="nothing was decided"):
        store.decide_approval("nope", "1", digest=DIGEST, outcome="approved", by=None, note=None)
    park_on(store, clock)
    with pytest.raises(ApprovalNotFound, match="no approval request '7'"):
        store.decide_approval("r1", "7", digest=DIGEST, outcome="approved", by=None, note=None)
    token = store.claim("r1", ME, 30, 10, dead).fencing_token
    store.finish("r1", token, CANCELLED, [])
    with pytest.raises(RunFinished, match="already cancelled"):
        store.decide_approval("r1", "1", digest=DIGEST, outcome="approved", by=None, note=None)
    assert store.get_approval("r1", "1").outcome is None  # type: ignore[union-attr]


def test_expiry_is_taken_once_by_the_driver_and_refuses_later_decisions(
    store: Store, clock: FakeClock
) -> None:
    park_on(store, clock, expires_in=60)
    expires = clock.time() + 60
    token = store.claim("r1", ME, 30, 10, dead).fencing_token
    row = store.approval_decision("r1", token, "1")
    assert row is not None and row.outcome is None  # not due yet: nothing taken
    clock.advance(60)
    # Past the expiry a person can no longer decide (the run takes the expiry).
    with pytest.raises(ApprovalAlreadyDecided, match="already expired"):
        store.decide_approval("r1", "1", digest=DIGEST, outcome="approved", by="ana", note=None)
    row = store.approval_decision("r1", token, "1")
    assert row is not None and (row.outcome, row.decided_at, row.by) == ("expired", expires, None)
    again = store.approval_decision("r1", token, "1")  # asked again (a crash, a replay)
    assert again == row
    assert kinds(store).count(APPROVAL_DECIDED) == 1
    with pytest.raises(ApprovalAlreadyDecided, match="already expired"):
        store.decide_approval("r1", "1", digest=DIGEST, outcome="approved", by="ana", note=None)


def test_a_decision_first_wins_over_the_expiry(store: Store, clock: FakeClock) -> None:
    park_on(store, clock, expires_in=60)
    store.decide_approval("r1", "1", digest=DIGEST, outcome="approved", by="ana", note=None)
    token = store.claim("r1", ME, 30, 10, dead).fencing_token
    clock.advance(120)
    row = store.approval_decision("r1", token, "1")
    assert row is not None and row.outcome == "approved"


def test_approval_decision_is_fenced(store: Store, clock: FakeClock) -> None:
    park_on(store, clock)
    old = store.claim("r1", ME, 30, 10, dead).fencing_token
    store.claim("r1", OTHER, 30, 10, dead)
    with pytest.raises(LeaseLost):
        store.approval_decision("r1", old, "1")
    assert store.approval_decision("r1", old + 1, "2") is None  # no request there


def test_concurrent_decisions_exactly_one_wins(store: Store, clock: FakeClock) -> None:
    import threading

    park_on(store, clock)
    won: list[str] = []
    refused: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(6)

    def decide(who: str) -> None:
        start.wait()
        try:
            store.decide_approval("r1", "1", digest=DIGEST, outcome="approved", by=who, note=None)
            with lock:
                won.append(who)
        except ApprovalAlreadyDecided as exc:
            with lock:
                refused.append(str(exc.by))

    threads = [threading.Thread(target=decide, args=(f"p{i}",)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len(won) == 1 and len(refused) == 5
    assert set(refused) == set(won)  # every refusal names the one who decided
    assert store.get_approval("r1", "1").by == won[0]  # type: ignore[union-attr]
    assert kinds(store).count(APPROVAL_DECIDED) == 1
