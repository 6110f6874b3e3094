"""The store's stream writer (``store.publish``), on every store: stream-only events are
written in batches on the writer's own connection, take cursors under the same rules as
every other event (in order, no gap, no repeat, interleaved with durable writes), and a
series from a process that no longer holds the run's fencing token is dropped. A
database that cannot keep up makes the writer drop events, never the caller wait."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator

import pytest

import durably
from durably.events import MODEL_DELTA, MODEL_RESTART, new_event
from durably.store import streamwriter
from durably.store.owner import Owner

from ..forking import run_in_child


@pytest.fixture
def engine(journal_url: str) -> Iterator[durably.Engine]:
    e = durably.Engine(journal_url)
    yield e
    e.close()


def _claimed(engine: durably.Engine, run_id: str, owner: Owner) -> int:
    @engine.workflow(name="idle")
    def idle(ctx: durably.Context) -> int:
        return 1

    engine.start(idle, run_id=run_id)
    return engine.store.claim(run_id, owner, 300, 10, lambda _: False).fencing_token


def _deltas(token: int, start: int, n: int) -> list[durably.events.NewEvent]:
    return [
        new_event(MODEL_DELTA, "0", {"text": f"t{i}", "index": i}, time.time(), f"d:{token}:{i}")
        for i in range(start, start + n)
    ]


def test_published_events_take_cursors_in_order_with_durable_writes(
    engine: durably.Engine,
) -> None:
    store = engine.store
    token = _claimed(engine, "w1", Owner("here", 1, "0", ""))
    for i in range(0, 30, 3):
        store.publish("w1", token, _deltas(token, i, 3))
    # A durable write in between: its event takes the next cursor, not a duplicate one.
    store.append("w1", token, [], [new_event("user", "0", {"kind": "k"}, 0.0, "emit:0:0")])
    store.publish("w1", token, _deltas(token, 30, 2))
    store.publish("w1", token, _deltas(token, 30, 2))  # a repeat is stored once
    assert store.flush_stream(10)
    events = engine.events("w1").events
    assert [e.cursor for e in events] == list(range(1, len(events) + 1))
    texts = [e.data["text"] for e in events if e.kind == MODEL_DELTA]
    assert texts == [f"t{i}" for i in range(32)]
    assert sum(e.kind == "user" for e in events) == 1


def test_a_stale_series_is_dropped(engine: durably.Engine) -> None:
    store = engine.store
    old = _claimed(engine, "w2", Owner("gone", 999_999, "0", ""))
    new = store.claim("w2", Owner("here", 2, "0", ""), 300, 10, lambda _: True).fencing_token
    store.publish("w2", old, _deltas(old, 0, 5))  # the process that lost the run
    store.publish("w2", new, _deltas(new, 0, 2))
    assert store.flush_stream(10)
    deltas = [e for e in engine.events("w2").events if e.kind == MODEL_DELTA]
    assert [e.data["text"] for e in deltas] == ["t0", "t1"]
    assert all(e.cursor > 0 for e in deltas)


def test_a_database_that_cannot_keep_up_drops_events_and_never_blocks(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = f"{tmp_path}/slow.db"
    # A busy timeout far above the bound below: a publish that waited for the database
    # would wait all of it, and a publish that did not has time to spare on a loaded
    # machine (the bound was 1 s against 5 s, and ten publishes took near a second).
    engine = durably.Engine(f"sqlite:///{path}", busy_timeout_s=60)
    try:
        token = _claimed(engine, "w3", Owner("here", 3, "0", ""))
        monkeypatch.setattr(streamwriter, "STREAM_QUEUE_MAX", 10)
        blocker = sqlite3.connect(path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")  # the writer's transaction waits behind it
        try:
            started = time.monotonic()
            engine.store.publish("w3", token, _deltas(token, 0, 4))  # taken by the writer
            time.sleep(0.1)
            for i in range(4, 40, 4):
                engine.store.publish("w3", token, _deltas(token, i, 4))
            assert time.monotonic() - started < 30  # nothing waited for the database
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        assert engine.store.flush_stream(10)
        writer = engine.store._stream_writer
        assert writer is not None and writer.dropped > 0
        stored = [e for e in engine.events("w3").events if e.kind == MODEL_DELTA]
        assert len(stored) == 40 - writer.dropped
    finally:
        engine.close()


def test_a_full_queue_still_takes_a_restart(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deltas may be dropped when the database cannot keep up, a ``model.restart`` never:
    a follower that missed it would show the new attempt's text after the old one's."""
    path = f"{tmp_path}/slow.db"
    engine = durably.Engine(f"sqlite:///{path}", busy_timeout_s=5)
    try:
        token = _claimed(engine, "w5", Owner("here", 5, "0", ""))
        monkeypatch.setattr(streamwriter, "STREAM_QUEUE_MAX", 10)
        blocker = sqlite3.connect(path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")  # the writer's transaction waits behind it
        try:
            engine.store.publish("w5", token, _deltas(token, 0, 4))  # taken by the writer
            time.sleep(0.1)
            engine.store.publish("w5", token, _deltas(token, 4, 10))  # fills the queue
            restart = new_event(MODEL_RESTART, "0", {"attempt": 2}, time.time(), "r:2")
            engine.store.publish("w5", token, [restart, *_deltas(token, 14, 4)])
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        assert engine.store.flush_stream(10)
        kinds = [e.kind for e in engine.events("w5").events if e.kind != "run.created"]
        assert MODEL_RESTART in kinds, kinds
        writer = engine.store._stream_writer
        assert writer is not None and writer.dropped == 4  # the second attempt's deltas
    finally:
        engine.close()


def test_a_forked_child_writes_through_a_writer_of_its_own(tmp_path: object) -> None:
    engine = durably.Engine(f"sqlite:///{tmp_path}/fork.db")
    try:
        store = engine.store
        token = _claimed(engine, "w4", Owner("here", 4, "0", ""))
        store.publish("w4", token, _deltas(token, 0, 2))  # the parent's writer thread runs
        assert store.flush_stream(10)

        def child() -> None:  # the parent's thread and connection are not here
            store.publish("w4", token, _deltas(token, 2, 2))
            assert store.flush_stream(10)

        run_in_child(child)
        store.publish("w4", token, _deltas(token, 4, 2))  # the parent's writer still works
        assert store.flush_stream(10)
        texts = [e.data["text"] for e in engine.events("w4").events if e.kind == MODEL_DELTA]
        assert texts == [f"t{i}" for i in range(6)]
    finally:
        engine.close()


@pytest.mark.filterwarnings("ignore:.*fork.*:DeprecationWarning")  # a thread at the fork
def test_a_fork_waits_for_the_writers_transaction(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A child forked while the writer thread is inside its transaction would inherit
    SQLite's process-wide lock state and never write the journal: the fork waits for
    the transaction, as it does for the store's own."""
    engine = durably.Engine(f"sqlite:///{tmp_path}/fork2.db")
    try:
        store = engine.store
        token = _claimed(engine, "w5", Owner("here", 5, "0", ""))
        inside, go_on = threading.Event(), threading.Event()
        real = streamwriter.write_batch

        def held(tx: object, batch: object) -> None:
            inside.set()
            go_on.wait(10)
            real(tx, batch)  # type: ignore[arg-type]

        monkeypatch.setattr(streamwriter, "write_batch", held)
        store.publish("w5", token, _deltas(token, 0, 2))
        assert inside.wait(10)
        monkeypatch.setattr(streamwriter, "write_batch", real)
        threading.Timer(0.2, go_on.set).start()  # the fork waits until then

        def child() -> None:
            store.busy_timeout_s = 0.5  # type: ignore[attr-defined]
            store.publish("w5", token, _deltas(token, 2, 2))
            assert store.flush_stream(10)
            writer = store._stream_writer  # type: ignore[attr-defined]
            assert (writer.written, writer.failed) == (2, 0)

        run_in_child(child)
        assert store.flush_stream(10)
        texts = [e.data["text"] for e in engine.events("w5").events if e.kind == MODEL_DELTA]
        assert texts == [f"t{i}" for i in range(4)]
    finally:
        go_on.set()
        engine.close()
