"""The idempotency store contract: every test runs on SQLite and on PostgreSQL."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from idem_helpers import FakeClock

from durably.errors import (
    ConfigError,
    IdempotencyKeyInFlight,
    IdempotencyKeyReused,
    SerializationError,
)
from durably.idempotency import (
    Claim,
    ClientError,
    IdempotencyLeaseLost,
    IdempotencyRecord,
    IdempotencyStore,
    InvalidIdempotencyKey,
    RequestFailed,
    fingerprint_of,
)

MakeStore = Callable[..., IdempotencyStore]


class Counter:
    """A function that counts its calls and returns a JSON value."""

    def __init__(self, result: Any = None) -> None:
        self.calls = 0
        self.result = {"ticket": 7} if result is None else result

    def __call__(self, *args: Any) -> Any:
        self.calls += 1
        return self.result


def test_first_request_runs_and_its_result_is_stored(make_store: MakeStore, clock: FakeClock):
    store = make_store(ttl_s=3600)
    fn = Counter()
    record = store.execute("k1", "fp", fn)
    assert fn.calls == 1
    assert record.ok and record.result == {"ticket": 7} and not record.replayed
    assert record.created_at == clock.now and record.completed_at == clock.now
    assert record.expires_at == clock.now + 3600
    assert record.attempts == 1 and record.key == "k1" and record.fingerprint == "fp"


def test_same_key_and_fingerprint_replays_without_running(make_store: MakeStore):
    store = make_store()
    fn = Counter()
    first = store.execute("k1", "fp", fn)
    second = store.execute("k1", "fp", fn)
    assert fn.calls == 1
    assert second.replayed and second.result == first.result
    assert second.expires_at == first.expires_at
    # A second store on the same database sees the same outcome (it is not process memory).
    assert make_store().execute("k1", "fp", fn).result == {"ticket": 7}
    assert fn.calls == 1


def test_live_result_equals_replayed_result(make_store: MakeStore):
    store = make_store()
    live = store.execute("k", "fp", Counter(result={"b": (1, 2), "a": None}))
    replayed = store.execute("k", "fp", Counter())
    assert live.result == replayed.result == {"a": None, "b": [1, 2]}


def test_same_key_with_another_fingerprint_is_refused(make_store: MakeStore):
    store = make_store()
    fn = Counter()
    store.execute("k1", "fp-a", fn)
    with pytest.raises(IdempotencyKeyReused, match="new key") as info:
        store.execute("k1", "fp-b", fn)
    assert "'k1'" in str(info.value)
    assert fn.calls == 1


def test_request_while_first_is_running_is_in_flight(make_store: MakeStore, clock: FakeClock):
    store = make_store(lease_s=30)
    claim = store.begin("k1", "fp")
    assert isinstance(claim, Claim)
    fn = Counter()
    clock.advance(29)
    with pytest.raises(IdempotencyKeyInFlight, match="still running"):
        store.execute("k1", "fp", fn)
    with pytest.raises(IdempotencyKeyReused):
        store.execute("k1", "other", fn)
    assert fn.calls == 0
    done = store.complete(claim, {"v": 1})
    assert not done.replayed and done.result == {"v": 1}
    assert store.execute("k1", "fp", fn).replayed and fn.calls == 0


def test_dead_owner_lease_runs_out_and_a_retry_takes_over(make_store: MakeStore, clock: FakeClock):
    store = make_store(lease_s=10)
    stale = store.begin("k1", "fp")
    assert isinstance(stale, Claim)
    clock.advance(10.5)
    fn = Counter()
    record = store.execute("k1", "fp", fn)
    assert fn.calls == 1 and record.attempts == 2 and not record.replayed
    # The first owner waking up late cannot overwrite the outcome.
    with pytest.raises(IdempotencyLeaseLost, match="lease"):
        store.complete(stale, {"late": True})
    assert store.execute("k1", "fp", fn).result == {"ticket": 7}


def test_renewed_lease_keeps_the_key(make_store: MakeStore, clock: FakeClock):
    store = make_store(lease_s=10)
    claim = store.begin("k1", "fp")
    assert isinstance(claim, Claim)
    for _ in range(5):
        clock.advance(8)
        assert store.renew(claim)
    with pytest.raises(IdempotencyKeyInFlight):
        store.execute("k1", "fp", Counter())
    clock.advance(11)
    store.execute("k1", "fp", Counter())
    assert not store.renew(claim) and claim.lost


def test_heartbeat_renews_the_lease_of_a_slow_request(db_url: str):
    # Real time: the heartbeat thread is what keeps a live request's key, however long it
    # runs past lease_s. A lease of 1 s (a renewal every 0.33 s): at 0.3 s a loaded
    # machine that held the heartbeat thread off for a lease's length let the key go.
    store = IdempotencyStore(db_url, lease_s=1.0, heartbeat=True)
    other = IdempotencyStore(db_url, lease_s=1.0, heartbeat=False)
    started, finish = threading.Event(), threading.Event()
    calls: list[int] = []

    def slow() -> str:
        started.set()
        calls.append(1)
        finish.wait(30)  # until the test has tried to take the key
        return "done"

    try:
        worker = threading.Thread(target=store.execute, args=("k", "fp", slow))
        worker.start()
        started.wait(30)
        time.sleep(1.5)  # past the lease by half: without renewals the key would be free
        try:
            with pytest.raises(IdempotencyKeyInFlight):
                other.execute("k", "fp", slow)
        finally:
            finish.set()
        worker.join(30)
        assert other.execute("k", "fp", slow).result == "done"
        assert len(calls) == 1
    finally:
        store.close()
        other.close()


def test_client_error_is_stored_and_replayed(make_store: MakeStore):
    store = make_store()
    calls = []

    def declined() -> None:
        calls.append(1)
        raise ClientError("card declined", data={"code": "card_declined"})

    live = store.execute("k1", "fp", declined)
    assert not live.ok and live.error is not None
    assert live.error.type_name == "ClientError" and live.error.message == "card declined"
    assert live.error.data == {"code": "card_declined"}
    with pytest.raises(RequestFailed, match="card declined") as info:
        live.value()
    assert isinstance(info.value.__cause__, ClientError)
    replayed = store.execute("k1", "fp", declined)
    assert replayed.replayed and replayed.error == live.error and len(calls) == 1
    with pytest.raises(RequestFailed) as info:
        replayed.value()
    assert info.value.__cause__ is None and info.value.data == {"code": "card_declined"}


def test_custom_client_error_types_are_stored(make_store: MakeStore):
    store = make_store(client_errors=(ValueError,))

    def bad() -> None:
        raise ValueError("amount must be positive")

    assert store.execute("k1", "fp", bad).error is not None
    assert store.execute("k1", "fp", bad).replayed


def test_server_error_is_not_stored_so_a_retry_finishes_the_work(make_store: MakeStore):
    store = make_store()
    attempts = []

    def flaky() -> str:
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("database down")
        return "ok"

    with pytest.raises(RuntimeError, match="database down"):
        store.execute("k1", "fp", flaky)
    assert store.get("k1") is None
    assert store.execute("k1", "fp", flaky).result == "ok"
    assert len(attempts) == 2


def test_store_server_errors_option_stores_them(make_store: MakeStore):
    store = make_store(store_server_errors=True)
    attempts = []

    def broken() -> None:
        attempts.append(1)
        raise RuntimeError("database down")

    first = store.execute("k1", "fp", broken)
    assert first.error is not None and first.error.type_name == "RuntimeError"
    assert store.execute("k1", "fp", broken).replayed and len(attempts) == 1


def test_interrupt_frees_the_key(make_store: MakeStore):
    store = make_store()

    def interrupted() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        store.execute("k1", "fp", interrupted)
    assert store.execute("k1", "fp", Counter()).result == {"ticket": 7}


def test_keys_expire_after_the_window(make_store: MakeStore, clock: FakeClock):
    store = make_store(ttl_s=60)
    fn = Counter()
    record = store.execute("k1", "fp", fn)
    clock.advance(59)
    assert store.execute("k1", "fp", fn).replayed and store.get("k1") is not None
    clock.advance(1)
    assert clock.now >= record.expires_at
    assert store.get("k1") is None
    # After expiry the key is new again, even for another request.
    fresh = store.execute("k1", "another", fn)
    assert not fresh.replayed and fn.calls == 2 and fresh.expires_at == clock.now + 60


def test_purge_deletes_expired_keys_only(make_store: MakeStore, clock: FakeClock):
    store = make_store(ttl_s=60, lease_s=600, purge_interval_s=10**9)
    for i in range(5):
        store.execute(f"old{i}", "fp", Counter())
    running = store.begin("running", "fp")
    assert isinstance(running, Claim)
    clock.advance(61)
    store.execute("new", "fp", Counter())
    assert store.purge_expired() == 5
    assert store.purge_expired() == 0
    assert store.get("new") is not None
    with pytest.raises(IdempotencyKeyInFlight):  # its lease is alive, so it was kept
        store.execute("running", "fp", Counter())


def test_expired_keys_are_purged_lazily(make_store: MakeStore, clock: FakeClock):
    store = make_store(ttl_s=60, purge_interval_s=30, purge_batch_size=2)
    for i in range(3):
        store.execute(f"old{i}", "fp", Counter())
    clock.advance(61)
    store.execute("trigger", "fp", Counter())  # begin() purges a batch of two
    assert store.purge_expired() == 1


def test_key_limits(make_store: MakeStore):
    store = make_store()
    assert store.execute("x" * 255, "fp", Counter()).key == "x" * 255
    for bad in ["", "x" * 256, "a\nb", 42]:
        with pytest.raises(InvalidIdempotencyKey) as info:
            store.execute(bad, "fp", Counter())  # type: ignore[arg-type]
        assert isinstance(info.value, ValueError) and isinstance(info.value, ConfigError)
    with pytest.raises(InvalidIdempotencyKey, match="255"):
        store.execute("x" * 256, "fp", Counter())
    with pytest.raises(ConfigError, match="fingerprint"):
        store.execute("k", "", Counter())


def test_scopes_keep_keys_apart(make_store: MakeStore):
    store = make_store()
    a = store.execute("k", "fp-a", Counter("a"), scope="client-a")
    b = store.execute("k", "fp-b", Counter("b"), scope="client-b")
    assert (a.result, b.result) == ("a", "b")
    assert store.get("k", scope="client-a") == IdempotencyRecord(
        **{**a.__dict__, "replayed": True, "exception": None}
    )


def test_an_unstorable_result_is_refused_and_never_run_again(make_store: MakeStore):
    """The work ran even though its outcome could not be stored: a retry must get a
    clear refusal, never a second run (that would repeat the effect)."""
    store = make_store()
    retry = Counter()
    with pytest.raises(SerializationError, match="JSON"):
        store.execute("k1", "fp", lambda: object())
    with pytest.raises(RequestFailed, match="could not be stored") as refused:
        store.execute("k1", "fp", retry).value()
    assert refused.value.type_name == "OutcomeNotStored"
    small = make_store(result_bytes_max=10)
    with pytest.raises(SerializationError, match="result_bytes_max"):
        small.execute("k2", "fp", lambda: "x" * 100)
    with pytest.raises(RequestFailed, match="result_bytes_max"):
        small.execute("k2", "fp", retry).value()
    assert retry.calls == 0


class FailingClock(FakeClock):
    """A fake clock that raises once when armed: a failure inside a store transaction."""

    armed = False

    def __call__(self) -> float:
        if self.armed:
            self.armed = False
            raise OSError("the clock failed")
        return super().__call__()


def test_a_failed_complete_releases_the_key(make_store: MakeStore):
    clock = FailingClock()
    store = make_store(clock=clock, lease_s=30)
    claim = store.begin("k", "fp")
    assert isinstance(claim, Claim)
    clock.armed = True
    with pytest.raises(OSError, match="clock failed"):
        store.complete(claim, {"ok": 1})
    # Not held until the lease runs out: a retry runs now.
    assert isinstance(store.begin("k", "fp"), Claim)


def test_the_reused_key_message_gives_out_no_fingerprint(make_store: MakeStore):
    store = make_store()
    first = fingerprint_of("transfer", 100)
    store.execute("k", first, Counter())
    with pytest.raises(IdempotencyKeyReused) as reused:
        store.execute("k", fingerprint_of("transfer", 101), Counter())
    text = str(reused.value)
    assert not any(first[i : i + 8] in text for i in range(len(first) - 8))


def test_bad_options_are_config_errors(db_url: str):
    with pytest.raises(ConfigError, match="ttl_s"):
        IdempotencyStore(db_url, ttl_s=0)
    with pytest.raises(ConfigError, match="lease_s"):
        IdempotencyStore(db_url, lease_s=-1)
    with pytest.raises(ConfigError, match="unsupported"):
        IdempotencyStore("mysql://x")
    with pytest.raises(ConfigError, match="file"):
        IdempotencyStore("sqlite:///:memory:")


# -- fn inside the store's transaction -------------------------------------------------------


def _create_effects_table(conn: Any) -> None:
    conn.execute("CREATE TABLE IF NOT EXISTS effects (what TEXT NOT NULL)")


def _count_effects(store: IdempotencyStore) -> int:
    def count(conn: Any) -> int:
        return int(conn.execute("SELECT count(*) FROM effects").fetchone()[0])

    with store._db.transaction("idempotency.sql") as tx:
        return count(tx.conn)


def test_in_transaction_commits_work_and_outcome_together(make_store: MakeStore):
    store = make_store()
    with store._db.transaction("idempotency.sql") as tx:
        _create_effects_table(tx.conn)

    def write(conn: Any) -> str:
        placeholder = "?" if isinstance(conn, sqlite3.Connection) else "%s"
        conn.execute(f"INSERT INTO effects (what) VALUES ({placeholder})", ("ticket",))
        return "created"

    assert store.execute("k1", "fp", write, in_transaction=True).result == "created"
    assert store.execute("k1", "fp", write, in_transaction=True).replayed
    assert _count_effects(store) == 1

    def write_then_fail(conn: Any) -> None:
        write(conn)
        raise RuntimeError("crash after the write")

    with pytest.raises(RuntimeError):
        store.execute("k2", "fp", write_then_fail, in_transaction=True)
    assert _count_effects(store) == 1 and store.get("k2") is None

    def write_then_refuse(conn: Any) -> None:
        write(conn)
        raise ClientError("over quota")

    refused = store.execute("k3", "fp", write_then_refuse, in_transaction=True)
    assert refused.error is not None and refused.error.message == "over quota"
    assert _count_effects(store) == 1  # the savepoint undid the write, the outcome stays
    assert store.execute("k3", "fp", write_then_refuse, in_transaction=True).replayed


def test_in_transaction_takes_over_a_dead_two_phase_claim(make_store: MakeStore, clock: FakeClock):
    store = make_store(lease_s=5)
    assert isinstance(store.begin("k1", "fp"), Claim)
    with pytest.raises(IdempotencyKeyInFlight):
        store.execute("k1", "fp", Counter(), in_transaction=True)
    clock.advance(6)
    record = store.execute("k1", "fp", Counter(), in_transaction=True)
    assert record.attempts == 2 and record.result == {"ticket": 7}


# -- the decorator ------------------------------------------------------------------------


def test_decorator_runs_once_per_key(make_store: MakeStore):
    store = make_store()
    calls: list[tuple[str, str]] = []

    @store.idempotent
    def open_ticket(title: str, *, idempotency_key: str) -> dict[str, str]:
        calls.append((title, idempotency_key))
        return {"title": title}

    assert open_ticket("disk full", idempotency_key="run-1:3") == {"title": "disk full"}
    assert open_ticket("disk full", idempotency_key="run-1:3") == {"title": "disk full"}
    assert calls == [("disk full", "run-1:3")]
    with pytest.raises(IdempotencyKeyReused):
        open_ticket("cpu hot", idempotency_key="run-1:3")
    assert open_ticket.__name__ == "open_ticket"


def test_decorator_options(make_store: MakeStore):
    store = make_store()

    @store.idempotent(scope="billing", fingerprint=lambda amount: f"charge:{amount}")
    def charge(amount: int) -> int:
        if amount <= 0:
            raise ClientError("amount must be positive")
        return amount

    assert charge(5, idempotency_key="c1") == 5
    with pytest.raises(RequestFailed, match="positive"):
        charge(-1, idempotency_key="c2")
    with pytest.raises(RequestFailed, match="positive"):
        charge(-1, idempotency_key="c2")
    assert store.get("c1", scope="billing") is not None and store.get("c1") is None

    @store.idempotent(in_transaction=True)
    def with_conn(conn: Any, x: int) -> int:
        return int(conn.execute("SELECT 1").fetchone()[0]) + x

    assert with_conn(1, idempotency_key="t1") == 2


def test_fingerprint_of_is_canonical():
    assert fingerprint_of({"a": 1, "b": 2}) == fingerprint_of({"b": 2, "a": 1})
    assert fingerprint_of("x", [1]) != fingerprint_of("x", [2])
    with pytest.raises(SerializationError):
        fingerprint_of(object())
