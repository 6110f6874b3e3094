"""The ``workers`` table (migration 0005): a worker's beat, its expiry, its removal, and a
crafted row, on every store."""

from __future__ import annotations

from durably.clock import FakeClock
from durably.store.base import Owner, Store

ME = Owner("h1", 811, "100", "m:b:1")
OTHER = Owner("h2", 812, "200", "m2:b2:2")


def test_a_beat_is_live_until_it_expires(store: Store, clock: FakeClock) -> None:
    assert store.live_workers() == []
    store.beat_worker(ME, ["default", "q"], ttl_s=30)
    store.beat_worker(OTHER, ["q"], ttl_s=60)
    assert store.live_workers() == [(str(ME), ("default", "q")), (str(OTHER), ("q",))]
    clock.sleep(45)  # ME missed its beats: dead; OTHER still live
    assert store.live_workers() == [(str(OTHER), ("q",))]
    store.beat_worker(ME, ["other"], ttl_s=30)  # a beat revives it, with its new queues
    assert (str(ME), ("other",)) in store.live_workers()


def test_a_stopped_worker_is_gone(store: Store) -> None:
    store.beat_worker(ME, ["q"], ttl_s=30)
    store.drop_worker(ME)
    store.drop_worker(ME)  # idempotent
    assert store.live_workers() == []


def test_a_crafted_queues_value_counts_as_no_queue(store: Store, store_url: str) -> None:
    store.beat_worker(ME, ["q"], ttl_s=30)
    _sql(store_url, 'UPDATE workers SET queues = \'{"not": "a list"}\'')
    assert store.live_workers() == [(str(ME), ())]


def _sql(url: str, statement: str) -> None:
    if url.startswith("sqlite:///"):
        import sqlite3

        with sqlite3.connect(url[len("sqlite:///") :]) as conn:
            conn.execute(statement)
        return
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(statement.encode())
