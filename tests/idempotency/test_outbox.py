"""The outbox contract on SQLite and PostgreSQL: record with the state, deliver at least once."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from idem_helpers import FakeClock

from durably.errors import ConfigError, IdempotencyKeyReused
from durably.idempotency import (
    IdempotencyStore,
    Outbox,
    OutboxMessage,
    RelayReport,
    fingerprint_of,
    migrate,
)


@contextmanager
def user_transaction(url: str) -> Iterator[Any]:
    """The application's own connection and transaction, opened the way an app would."""
    if url.startswith("sqlite:///"):
        conn = sqlite3.connect(url[len("sqlite:///") :])
        try:
            conn.execute("CREATE TABLE IF NOT EXISTS orders (ref TEXT NOT NULL)")
            with conn:  # commits on success, rolls back on error
                yield conn
        finally:
            conn.close()
    else:
        import psycopg

        with psycopg.connect(url) as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS orders (ref TEXT NOT NULL)")
            conn.commit()
            with conn.transaction():
                yield conn


def place_order(conn: Any, ref: str) -> None:
    placeholder = "?" if isinstance(conn, sqlite3.Connection) else "%s"
    conn.execute(f"INSERT INTO orders (ref) VALUES ({placeholder})", (ref,))


@pytest.fixture
def outbox(db_url: str, clock: FakeClock) -> Iterator[Outbox]:
    box = Outbox(db_url, clock=clock, max_attempts=3, backoff_base_s=10, claim_lease_s=60)
    yield box
    box.close()


class Recorder:
    """A deliver function that records what it sent and fails while told to."""

    def __init__(self) -> None:
        self.sent: list[OutboxMessage] = []
        self.fail_with: BaseException | None = None

    def __call__(self, message: OutboxMessage) -> None:
        self.sent.append(message)
        if self.fail_with is not None:
            raise self.fail_with


def test_message_commits_with_the_state_change(db_url: str, outbox: Outbox):
    with user_transaction(db_url) as conn:
        place_order(conn, "A-1")
        key = outbox.add(conn, "billing", {"order": "A-1", "amount": 10})
    with pytest.raises(RuntimeError), user_transaction(db_url) as conn:
        place_order(conn, "A-2")
        outbox.add(conn, "billing", {"order": "A-2"}, key="rolled-back")
        raise RuntimeError("the handler failed after recording")
    [entry] = outbox.messages()
    assert entry.key == key and entry.status == "pending" and entry.attempts == 0
    assert entry.payload == {"order": "A-1", "amount": 10} and entry.destination == "billing"


def test_relay_delivers_with_the_key_and_marks_delivered(
    db_url: str, outbox: Outbox, clock: FakeClock
):
    with user_transaction(db_url) as conn:
        for i in range(5):
            outbox.add(conn, "billing", {"n": i}, key=f"order-{i}")
    deliver = Recorder()
    assert outbox.relay(deliver, batch_size=3) == RelayReport(claimed=3, delivered=3)
    assert outbox.relay(deliver, batch_size=3) == RelayReport(claimed=2, delivered=2)
    assert outbox.relay(deliver, batch_size=3) == RelayReport()
    assert [m.key for m in deliver.sent] == [f"order-{i}" for i in range(5)]
    assert [m.payload for m in deliver.sent] == [{"n": i} for i in range(5)]
    delivered = outbox.messages(status="delivered")
    assert len(delivered) == 5 and all(e.delivered_at == clock.now for e in delivered)


class _BrokenStr(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no message")


@pytest.mark.parametrize(
    ("error", "recorded"),
    [
        (ValueError("binary\x00output"), "ValueError: binary\\x00output"),
        (ValueError("cut \ud83d"), "ValueError: cut \\ud83d"),
        (_BrokenStr(), "_BrokenStr: <str() of the error raised RuntimeError>"),
    ],
    ids=["NUL", "surrogate", "broken __str__"],
)
def test_a_delivery_error_the_database_cannot_store_is_recorded_escaped(
    db_url: str, outbox: Outbox, error: Exception, recorded: str
):
    # PostgreSQL's text refuses NUL, neither database takes a lone surrogate, and a
    # broken __str__ raises: the relay records the failure anyway, and goes on.
    with user_transaction(db_url) as conn:
        outbox.add(conn, "billing", {"n": 1}, key="k")
    deliver = Recorder()
    deliver.fail_with = error
    assert outbox.relay(deliver) == RelayReport(claimed=1, retrying=1)
    [entry] = outbox.messages()
    assert entry.last_error == recorded


def test_failures_back_off_then_the_message_is_dead(db_url: str, outbox: Outbox, clock: FakeClock):
    with user_transaction(db_url) as conn:
        outbox.add(conn, "billing", {"n": 1}, key="k")
    deliver = Recorder()
    deliver.fail_with = ConnectionError("billing is down")
    assert outbox.relay(deliver) == RelayReport(claimed=1, retrying=1)
    [entry] = outbox.messages()
    assert entry.attempts == 1 and entry.next_attempt_at == clock.now + 10
    assert entry.last_error == "ConnectionError: billing is down"
    clock.advance(9)
    assert outbox.relay(deliver) == RelayReport()  # not due yet
    clock.advance(1)
    assert outbox.relay(deliver) == RelayReport(claimed=1, retrying=1)
    assert outbox.messages()[0].next_attempt_at == clock.now + 20  # doubled
    clock.advance(20)
    assert outbox.relay(deliver) == RelayReport(claimed=1, dead=1)
    clock.advance(10**6)
    assert outbox.relay(deliver) == RelayReport()
    [dead] = outbox.messages(status="dead")
    assert dead.attempts == 3 and [m.attempts for m in deliver.sent] == [1, 2, 3]
    assert {m.key for m in deliver.sent} == {"k"}


def test_relay_that_dies_mid_delivery_delivers_again_with_the_same_key(
    db_url: str, outbox: Outbox, clock: FakeClock
):
    with user_transaction(db_url) as conn:
        outbox.add(conn, "billing", {"n": 1}, key="k")
    crashing = Recorder()
    crashing.fail_with = KeyboardInterrupt()  # not an Exception: the relay stops unmarked
    with pytest.raises(KeyboardInterrupt):
        outbox.relay(crashing)
    deliver = Recorder()
    assert outbox.relay(deliver) == RelayReport()  # still claimed by the dead relay
    clock.advance(61)
    assert outbox.relay(deliver) == RelayReport(claimed=1, delivered=1)
    assert deliver.sent[0].key == "k" and deliver.sent[0].attempts == 2


def test_relay_killed_on_every_attempt_still_runs_out_of_attempts(
    db_url: str, outbox: Outbox, clock: FakeClock
):
    with user_transaction(db_url) as conn:
        outbox.add(conn, "billing", {"n": 1}, key="poison")
    crashing = Recorder()
    crashing.fail_with = KeyboardInterrupt()
    for _ in range(3):
        with pytest.raises(KeyboardInterrupt):
            outbox.relay(crashing)
        clock.advance(61)
    assert outbox.relay(crashing) == RelayReport()
    assert outbox.messages()[0].status == "dead"


def test_redelivery_is_applied_once_by_a_receiver_that_honours_keys(
    db_url: str, outbox: Outbox, clock: FakeClock, tmp_path: Path
):
    receiver_url = f"sqlite:///{tmp_path / 'receiver.db'}"
    migrate(receiver_url)
    receiver = IdempotencyStore(receiver_url, clock=clock)
    applied: list[Any] = []
    with user_transaction(db_url) as conn:
        outbox.add(conn, "billing", {"charge": 10}, key="order-1")

    def deliver(message: OutboxMessage) -> None:
        receiver.execute(message.key, fingerprint_of(message.payload), lambda: applied.append(1))
        if message.attempts == 1:
            raise TimeoutError("the response was lost on the way back")

    try:
        outbox.relay(deliver)
        clock.advance(10)
        assert outbox.relay(deliver) == RelayReport(claimed=1, delivered=1)
        assert applied == [1]
    finally:
        receiver.close()


def test_adding_a_key_twice(db_url: str, outbox: Outbox):
    with user_transaction(db_url) as conn:
        assert outbox.add(conn, "billing", {"n": 1}, key="k") == "k"
        assert outbox.add(conn, "billing", {"n": 1}, key="k") == "k"  # a retried handler
        with pytest.raises(IdempotencyKeyReused, match="new key"):
            outbox.add(conn, "billing", {"n": 2}, key="k")
    assert len(outbox.messages()) == 1


def test_transaction_helper_and_bad_arguments(outbox: Outbox):
    with outbox.transaction() as conn:
        outbox.add(conn, "crm", {"x": 1})
    assert len(outbox.messages(status="pending")) == 1
    with outbox.transaction() as conn:
        with pytest.raises(ConfigError, match="destination"):
            outbox.add(conn, "", {})
        with pytest.raises(ConfigError, match="Connection"):
            outbox.add(object(), "crm", {})
    with pytest.raises(ConfigError, match="batch_size"):
        outbox.relay(Recorder(), batch_size=0)


def test_relays_in_parallel_deliver_each_message_once(db_url: str, outbox: Outbox):
    with outbox.transaction() as conn:
        for i in range(60):
            outbox.add(conn, "crm", {"n": i}, key=f"m{i}")
    deliver = Recorder()
    lock = threading.Lock()

    def locked(message: OutboxMessage) -> None:
        with lock:
            deliver(message)

    threads = [
        threading.Thread(target=outbox.relay, args=(locked,), kwargs={"batch_size": 7})
        for _ in range(12)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    keys = [m.key for m in deliver.sent]
    assert sorted(keys) == sorted(f"m{i}" for i in range(60))


def test_relay_loop_runs_until_stopped(db_url: str, clock: FakeClock):
    box = Outbox(db_url, clock=clock)
    stop = threading.Event()
    delivered = threading.Event()

    def deliver(message: OutboxMessage) -> None:
        delivered.set()

    loop = threading.Thread(
        target=box.relay_loop, args=(deliver,), kwargs={"stop": stop, "poll_interval_s": 0.02}
    )
    loop.start()
    try:
        with box.transaction() as conn:
            box.add(conn, "crm", {"x": 1})
        assert delivered.wait(10)
    finally:
        stop.set()
        loop.join(10)
        box.close()
    assert not loop.is_alive()


def _unheld(url: str, now: float) -> int:
    """Pending messages whose claim has run out (or that nobody claimed) at ``now``."""
    sql = "SELECT count(*) FROM durably_outbox WHERE status = 'pending' AND NOT claimed_until > {}"
    with user_transaction(url) as conn:
        mark = "?" if isinstance(conn, sqlite3.Connection) else "%s"
        return int(conn.execute(sql.format(mark), (now,)).fetchone()[0])


class TwoRelays:
    """Two relays on one outbox table, and the keys of what they delivered, in order."""

    def __init__(self, url: str, clock: FakeClock, claim_lease_s: float, messages: int) -> None:
        self.first = Outbox(url, clock=clock, claim_lease_s=claim_lease_s)
        self.second = Outbox(url, clock=clock, claim_lease_s=claim_lease_s)
        with self.first.transaction() as conn:
            self.keys = [
                self.first.add(conn, "billing", {"n": i}, key=f"m{i}") for i in range(messages)
            ]
        self.delivered: list[str] = []
        self.second_reports: list[RelayReport] = []

    def record(self, message: OutboxMessage) -> None:
        self.delivered.append(message.key)

    def run_second_relay(self) -> None:
        """One pass of the second relay, in a thread of its own, to its end."""
        other = threading.Thread(
            target=lambda: self.second_reports.append(self.second.relay(self.record))
        )
        other.start()
        other.join(60)

    def close(self) -> None:
        self.first.close()
        self.second.close()


def test_two_relays_never_deliver_one_message_twice(db_url: str, clock: FakeClock):
    """A slow relay keeps its batch: its claims are renewed while it delivers, so a second
    relay running meanwhile finds nothing to take."""
    relays = TwoRelays(db_url, clock, claim_lease_s=0.6, messages=4)  # renewed every 0.2 s

    def slow(message: OutboxMessage) -> None:
        relays.record(message)
        if message.key == relays.keys[0]:
            clock.advance(5.0)  # far past the batch's first claim
            deadline = time.monotonic() + 20
            while _unheld(db_url, clock.now) and time.monotonic() < deadline:
                time.sleep(0.05)  # until the keeper renewed the claims for the new time
            relays.run_second_relay()

    report = relays.first.relay(slow)
    assert sorted(relays.delivered) == sorted(relays.keys), "a message was delivered twice"
    assert report.delivered == 4 and relays.second_reports == [RelayReport()]
    relays.close()


def test_a_relay_that_lost_its_claims_neither_delivers_nor_counts_them(
    db_url: str, clock: FakeClock
):
    """A relay that stalled past its claims finds them taken over: it skips the rest, and
    the message it was delivering is not marked (or counted) delivered by it."""
    relays = TwoRelays(db_url, clock, claim_lease_s=600, messages=3)  # no keeper beat here

    def stalls(message: OutboxMessage) -> None:
        relays.record(message)
        if message.key == relays.keys[0]:
            clock.advance(700)  # the whole batch's claims run out
            relays.run_second_relay()

    report = relays.first.relay(stalls)
    assert relays.second_reports == [RelayReport(claimed=3, delivered=3)]
    assert report == RelayReport(claimed=3, lost=3)
    # Only the message in flight at the stall went out twice (at least once, same key).
    assert sorted(relays.delivered) == sorted([relays.keys[0], *relays.keys])
    assert [m.status for m in relays.first.messages()] == ["delivered"] * 3
    relays.close()
