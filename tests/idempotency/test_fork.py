"""Fork safety of the receiving side: the idempotency store and the outbox in a forked
child, on both databases, while a parent thread is inside a store call."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from tests.forking import run_in_child

from durably.errors import IdempotencyKeyInFlight
from durably.idempotency import IdempotencyRecord, IdempotencyStore, Outbox

pytestmark = pytest.mark.filterwarnings("ignore:.*fork.*:DeprecationWarning")


def _wait_for(path: Path, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.01)


def test_store_and_outbox_work_in_a_child_forked_inside_a_transaction(db_url: str) -> None:
    store = IdempotencyStore(db_url)
    outbox = Outbox(db_url)
    assert store.execute("before", "fp", lambda: 1).result == 1
    inside, go_on = threading.Event(), threading.Event()

    def held(conn: object) -> int:
        inside.set()
        assert go_on.wait(60)
        return 2

    holder = threading.Thread(
        target=lambda: store.execute("held", "fp", held, in_transaction=True), daemon=True
    )
    holder.start()
    assert inside.wait(60)

    def child() -> None:
        assert store.execute("in-child", "fp", lambda: 3).result == 3
        with outbox.transaction() as conn:
            outbox.add(conn, "billing", {"n": 1}, key="m1")
        assert outbox.relay(lambda message: None).delivered == 1
        outbox.close()
        store.close()

    # The fork waits for the transaction in progress (SQLite) and goes on once it ends.
    threading.Timer(0.3, go_on.set).start()
    run_in_child(child)
    holder.join(60)
    # The parent's connections are its own still: nothing was shared, nothing closed.
    record = store.get("in-child")
    assert record is not None and record.result == 3
    assert store.execute("after", "fp", lambda: 4).result == 4
    assert [m.status for m in outbox.messages()] == ["delivered"]
    outbox.close()
    store.close()


def test_a_childs_claims_are_heartbeated_by_the_child(db_url: str, tmp_path: Path) -> None:
    lease_s = 1.5
    store = IdempotencyStore(db_url, lease_s=lease_s)
    assert store.execute("warm-up", "fp", lambda: 0).result == 0  # the heartbeat exists
    claimed, finish = tmp_path / "claimed", tmp_path / "finish"

    def child() -> None:
        claim = store.begin("k", "fp")
        assert not isinstance(claim, IdempotencyRecord)
        claimed.touch()
        _wait_for(finish)
        store.complete(claim, {"by": "child"})
        store.close()

    def meanwhile() -> None:
        _wait_for(claimed)
        time.sleep(2 * lease_s)  # without renewals the child's lease would be over
        try:
            with pytest.raises(IdempotencyKeyInFlight):
                store.begin("k", "fp")
        finally:
            finish.touch()

    run_in_child(child, after_fork=meanwhile)
    record = store.get("k")
    assert record is not None and record.result == {"by": "child"}
    store.close()
