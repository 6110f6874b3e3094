"""The receiving side does not trust a local clock that runs ahead of the database's.

A replica of a service whose clock runs 120 s ahead sees a live request's lease expire two
minutes early. On PostgreSQL the store compares its (injected) clock with the server's at
start and periodically, warns past 2 s, and never takes over a request whose lease is
alive by the database's clock. Real PostgreSQL, fake clocks for the replicas.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from idem_helpers import FakeClock

from durably.errors import IdempotencyKeyInFlight
from durably.idempotency import IdempotencyStore, migrate

pytestmark = pytest.mark.postgres


@pytest.fixture
def url(pg_url: str) -> str:
    migrate(pg_url)
    return pg_url


@pytest.fixture
def opened() -> Iterator[list[IdempotencyStore]]:
    stores: list[IdempotencyStore] = []
    yield stores
    for s in stores:
        s.close()


def open_store(url: str, opened: list[IdempotencyStore], **options: Any) -> IdempotencyStore:
    options.setdefault("heartbeat", False)
    store = IdempotencyStore(url, lease_s=30, **options)
    opened.append(store)
    return store


def skew_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "off the database's" in r.getMessage()]


def test_a_replica_120s_ahead_does_not_take_over_a_live_request(
    url: str, opened: list[IdempotencyStore], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="durably.idempotency")
    honest = open_store(url, opened, clock=time.time)
    assert skew_warnings(caplog) == []  # this host's clock is the database's
    claim = honest.begin("refund-7", "fp")
    assert not isinstance(claim, Exception) and claim.attempts == 1  # type: ignore[union-attr]

    # A clock that runs, 120 s ahead: a FakeClock stands still, so the skew measured fell
    # behind 120 s by the time the test took on a loaded machine (+119.8 s, and no match).
    ahead = open_store(url, opened, clock=lambda: time.time() + 120)
    with pytest.raises(IdempotencyKeyInFlight, match=r"this host's clock is \+1(19|20)\.\d s off"):
        ahead.begin("refund-7", "fp")  # a take-over: the refund would run twice
    [warning] = skew_warnings(caplog)  # said once, at the replica's start
    assert re.search(r"\+1(19|20)\.\d", warning) and "Fix this host's clock" in warning
    # The live request finishes and stores its outcome; the replica gets it, runs nothing.
    honest.complete(claim, {"refund": "re_1"})  # type: ignore[arg-type]
    replayed = ahead.begin("refund-7", "fp")
    assert getattr(replayed, "replayed", False) and replayed.result == {"refund": "re_1"}  # type: ignore[union-attr]


def test_a_replica_ahead_still_takes_over_a_request_dead_by_the_databases_clock(
    url: str, opened: list[IdempotencyStore]
) -> None:
    # A request claimed 40 s ago by the database's clock (its 30 s lease is over) by a
    # process that died: even a replica running ahead takes it over.
    dead = open_store(url, opened, clock=lambda: time.time() - 40)
    dead.begin("refund-8", "fp")
    ahead = open_store(url, opened, clock=FakeClock(time.time() + 120))
    taken = ahead.begin("refund-8", "fp")
    assert getattr(taken, "attempts", None) == 2


def test_a_clock_that_jumps_ahead_is_caught_by_the_periodic_check(
    url: str, opened: list[IdempotencyStore], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="durably.idempotency")
    honest = open_store(url, opened, clock=time.time)
    claim = honest.begin("refund-9", "fp")
    clock = FakeClock(time.time())
    replica = open_store(url, opened, clock=clock, clock_check_s=0.05)
    assert skew_warnings(caplog) == []
    clock.advance(120)  # the replica's clock jumps (a bad NTP step, a VM resumed)
    time.sleep(0.1)  # past clock_check_s of real time: the next request checks again
    with pytest.raises(IdempotencyKeyInFlight, match="clock"):
        replica.begin("refund-9", "fp")
    assert len(skew_warnings(caplog)) == 1
    honest.complete(claim, "done")  # type: ignore[arg-type]


def test_a_replica_ahead_keeps_a_stored_outcome_for_its_whole_window(
    url: str, opened: list[IdempotencyStore]
) -> None:
    # Stored 24 h minus 60 s ago by the database's clock: 60 s of its window are left, so
    # a replica 120 s ahead must replay it, not run the request again.
    old = open_store(url, opened, clock=lambda: time.time() - 86_400 + 60)
    old.execute("refund-10", "fp", lambda: "first")
    ahead = open_store(url, opened, clock=FakeClock(time.time() + 120))
    record = ahead.execute("refund-10", "fp", lambda: "second")
    assert (record.replayed, record.result) == (True, "first")
    assert ahead.get("refund-10") is not None
    assert ahead.purge_expired() == 0


def test_a_relay_120s_ahead_does_not_take_over_a_live_relays_claims(url: str) -> None:
    import psycopg

    from durably.idempotency import Outbox, OutboxMessage

    honest = Outbox(url, clock=time.time, claim_lease_s=30)
    ahead = Outbox(url, clock=FakeClock(time.time() + 120), claim_lease_s=30)
    try:
        with psycopg.connect(url) as conn, conn.transaction():
            honest.add(conn, "billing", {"refund": 7}, key="refund-7")
        sent: list[str] = []
        stolen: list[int] = []

        def deliver(message: OutboxMessage) -> None:
            # While the honest relay delivers, the replica ahead runs a pass of its own.
            stolen.append(ahead.relay(lambda m: sent.append(f"ahead {m.key}")).claimed)
            sent.append(f"honest {message.key}")

        report = honest.relay(deliver)
        assert (report.delivered, stolen, sent) == (1, [0], ["honest refund-7"])
    finally:
        honest.close()
        ahead.close()
