"""Group commit (issue 28): appends made while a commit is in progress share the next
one; each caller returns only after the commit that carries its record; a lone append
writes at once, alone; a stale record in a batch fails alone."""

from __future__ import annotations

import hashlib
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from durably.clock import FakeClock
from durably.errors import CorruptRecord, LeaseLost, StoreBusy, StoreDiskFull
from durably.events import new_event
from durably.store.groupcommit import Append, GroupCommit
from durably.store.open import open_store

from ..contract.test_store_contract import ME, alive, new_run, rec


def _item(run_id: str, token: int = 1) -> Append:
    return Append(run_id, token, [rec("0")], (), durable=True)


def _claimed(store: Any, *run_ids: str) -> dict[str, int]:
    """Create and claim each run; their fencing tokens by run id."""
    tokens = {}
    for run_id in run_ids:
        store.create_run(new_run(run_id))
        tokens[run_id] = store.claim(run_id, ME, 30, 10, alive).fencing_token
    return tokens


def test_a_lone_append_is_written_alone_at_once() -> None:
    calls: list[str] = []
    group = GroupCommit(lambda i: calls.append(i.run_id) or True, lambda b: calls.append("many"))
    assert group.submit(_item("a")) is True
    assert calls == ["a"] and group.batches == 0


class _Held:
    """A group whose first writer is held inside its commit until released, so that
    the callers started meanwhile queue behind it."""

    def __init__(self, write_many: Callable[[Sequence[Append]], None]) -> None:
        self.started, self.release = threading.Event(), threading.Event()
        self.group = GroupCommit(self._write_one, write_many)
        self.returned: dict[str, object] = {}

    def _write_one(self, item: Append) -> bool:
        self.started.set()
        self.release.wait(10)
        return False

    def call(self, run_id: str, committed: threading.Event) -> None:
        try:
            self.returned[run_id] = (self.group.submit(_item(run_id)), committed.is_set())
        except StoreBusy as exc:
            self.returned[run_id] = exc

    def run(self, committed: threading.Event, followers: int) -> None:
        leader = threading.Thread(target=self.call, args=("r0", committed))
        leader.start()
        assert self.started.wait(10)
        names = [f"r{k}" for k in range(1, followers + 1)]
        threads = [threading.Thread(target=self.call, args=(n, committed)) for n in names]
        for t in threads:
            t.start()
        while len(self.group._queue) < followers:  # all queued behind the commit
            time.sleep(0.001)
        assert self.returned == {}  # nobody acknowledged before its commit
        self.release.set()
        for t in [leader, *threads]:
            t.join(10)


def test_appends_queued_during_a_commit_share_the_next_and_wait_for_it() -> None:
    committed = threading.Event()
    batches: list[list[str]] = []

    def write_many(items: Sequence[Append]) -> None:
        batches.append(sorted(i.run_id for i in items))
        for i in items:
            i.result = i.run_id == "r3"
        committed.set()

    held = _Held(write_many)
    held.run(committed, 4)
    assert batches == [["r1", "r2", "r3", "r4"]]
    # Each caller got its own outcome; the followers only after the batch's commit.
    assert held.returned == {
        "r0": (False, False),
        "r1": (False, True),
        "r2": (False, True),
        "r3": (True, True),
        "r4": (False, True),
    }
    assert (held.group.batches, held.group.batched) == (1, 4)


def test_a_caller_finding_the_writer_idle_takes_what_is_queued_with_it() -> None:
    """Was: a commit ended, its queued callers were woken, and a caller arriving before any
    of them ran found the writer idle and wrote its append alone, busy again; the woken
    callers went back to sleep, and the same thread wrote alone commit after commit
    (100 threaded runs made 515-800 steps a second, 10 made 1,290). Now the arriving
    caller takes the queue with it. The moment is set up directly: appends queued, no
    commit in progress, their callers not yet back from their wake-up."""
    alone: list[str] = []
    batches: list[list[str]] = []

    def write_many(items: Sequence[Append]) -> None:
        batches.append([i.run_id for i in items])

    group = GroupCommit(lambda i: alone.append(i.run_id) or False, write_many)
    waiting = [_item("w1"), _item("w2")]
    group._queue = list(waiting)  # notified, not yet running
    assert group.submit(_item("new")) is False
    assert alone == [] and batches == [["w1", "w2", "new"]]
    assert all(w.done and w.error is None for w in waiting) and group._queue == []


def test_a_failed_transaction_is_every_queued_callers_error() -> None:
    def write_many(items: Sequence[Append]) -> None:
        raise StoreBusy("locked")

    held = _Held(write_many)
    held.run(threading.Event(), 2)
    assert held.returned["r0"] == (False, False)
    assert isinstance(held.returned["r1"], StoreBusy)
    assert isinstance(held.returned["r2"], StoreBusy)
    assert held.group.submit(_item("r9")) is False  # the queue works on afterwards


def test_a_batch_fences_each_record_alone(journal_url: str) -> None:
    store: Any = open_store(journal_url, FakeClock())
    tokens = _claimed(store, *("a", "b", "c"))
    ev = new_event("step.completed", "0", {}, 1.0, "b:0:x")
    items = [
        Append("a", tokens["a"], [rec("0")], (), durable=True),
        Append("b", tokens["b"] + 1, [rec("0")], (ev,), durable=True),  # stale
        Append("c", tokens["c"], [rec("0"), rec("1")], (), durable=True),
        Append("a", tokens["a"], [rec("0", output='"other"')], (), durable=True),  # overwrite
    ]
    store._append_many(items)
    assert isinstance(items[1].error, LeaseLost)
    assert items[3].error is not None and "never overwritten" in str(items[3].error)
    assert items[0].error is None and items[2].error is None
    assert [r.position for r in store.load_history("a", 0)] == ["0"]
    assert store.load_history("b", 0) == []
    assert [r.position for r in store.load_history("c", 0)] == ["0", "1"]
    page = store.read_events("b", 0, 100)
    assert page is not None and "step.completed" not in [e.kind for e in page.events]
    store.close()


def test_concurrent_appends_commit_every_record(journal_url: str) -> None:
    store = open_store(journal_url, FakeClock())
    runs = [f"r{k}" for k in range(16)]
    tokens = {}
    for run_id in runs:
        store.create_run(new_run(run_id))
        tokens[run_id] = store.claim(run_id, ME, 30, 10, alive).fencing_token
    start = threading.Barrier(len(runs))

    def drive(run_id: str) -> None:
        start.wait()
        for i in range(20):
            store.append(run_id, tokens[run_id], [rec(str(i))])

    threads = [threading.Thread(target=drive, args=(r,)) for r in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for run_id in runs:
        assert len(store.load_history(run_id, 0)) == 20
    store.close()


class _Crash(BaseException):
    """An injected crash (a BaseException, like KeyboardInterrupt or LeaseLost)."""


def test_a_leaders_own_interruption_is_not_its_followers_error() -> None:
    written: list[str] = []
    crashed: list[str] = []

    def write_many(items: Sequence[Append]) -> None:
        if not crashed:
            crashed.append(max(i.run_id for i in items))
            raise _Crash("the leader's thread was interrupted")
        written.extend(i.run_id for i in items)

    held = _Held(write_many)
    calls = held.call

    def call(run_id: str, committed: threading.Event) -> None:
        try:
            calls(run_id, committed)
        except _Crash as exc:
            held.returned[run_id] = exc

    held.call = call  # type: ignore[method-assign]
    base_one = held._write_one
    held.group._write_one = lambda i: written.append(i.run_id) or base_one(i)
    held.run(threading.Event(), 2)
    got = {
        k: type(v).__name__ if isinstance(v, BaseException) else v for k, v in held.returned.items()
    }
    # One of the two followers led the batch and was interrupted: it alone raises; the
    # other's append went back to the queue and was written by the next leader.
    assert sorted(got.values(), key=str) == [(False, False), (False, False), "_Crash"]
    assert sorted(written) == [
        "r0",
        *sorted({"r1", "r2"} - {k for k, v in got.items() if v == "_Crash"}),
    ]
    assert held.group._queue == [] and not held.group._busy


def test_a_follower_interrupted_while_queued_withdraws_its_append() -> None:
    """A KeyboardInterrupt in the main thread waiting behind a commit: its append must
    not stay queued, or a later leader would write it long after its caller gave up."""
    batches: list[list[str]] = []
    held = _Held(lambda items: batches.append(sorted(i.run_id for i in items)))
    leader = threading.Thread(target=held.call, args=("r0", threading.Event()))
    leader.start()
    assert held.started.wait(10)
    main = threading.get_ident()

    def interrupt() -> None:
        while not held.group._queue:
            time.sleep(0.001)
        signal.pthread_kill(main, signal.SIGINT)

    kicker = threading.Thread(target=interrupt)
    kicker.start()
    with pytest.raises(KeyboardInterrupt):
        held.group.submit(_item("gave-up"))
    kicker.join(10)
    held.release.set()
    leader.join(10)
    assert held.group._queue == [] and not held.group._busy
    # The next batch carries only its own callers' appends.
    held.started.clear()
    held.release.clear()
    held.returned.clear()
    held.run(threading.Event(), 2)
    assert batches == [["r1", "r2"]]


def test_a_record_failing_its_check_fails_alone_in_a_batch(journal_url: str) -> None:
    store: Any = open_store(journal_url, FakeClock())
    tokens = _claimed(store, *("a", "b"))
    items = [
        Append("a", tokens["a"], [replace(rec("0"), attempts=0)], (), durable=True),
        Append("b", tokens["b"], [rec("0")], (), durable=True),
    ]
    store._append_many(items)
    assert isinstance(items[0].error, CorruptRecord)  # its own error, as when alone
    assert items[1].error is None
    assert store.load_history("a", 0) == []
    assert [r.position for r in store.load_history("b", 0)] == ["0"]
    store.close()


def test_a_full_disk_inside_a_batch_is_a_disk_full_error(tmp_path: Path) -> None:
    """SQLite only: its database size limit is a real SQLITE_FULL (PostgreSQL's full disk
    cannot be made by a test). SQLite may roll the whole transaction back on it, leaving
    no savepoint: the batch's callers get StoreDiskFull (free space, resume), not "no such
    savepoint", and nothing of the batch is stored."""
    store: Any = open_store(f"sqlite:///{tmp_path / 'j.db'}", FakeClock())
    tokens = _claimed(store, *("a", "b"))
    big = "x" * 2_000_000
    blob = (hashlib.sha256(big.encode()).hexdigest(), big)
    items = [
        Append("a", tokens["a"], [rec("0")], (), durable=True),
        Append("b", tokens["b"], [replace(rec("0"), blobs=(blob,))], (), durable=True),
    ]
    pages = store._conn.execute("PRAGMA page_count").fetchone()[0]
    store._conn.execute(f"PRAGMA max_page_count = {pages + 2}")
    with pytest.raises(StoreDiskFull, match="disk is full"):
        store._append_many(items)
    assert store.load_history("a", 0) == [] and store.load_history("b", 0) == []
    store._conn.execute("PRAGMA max_page_count = 1073741823")
    store._append_many(items)  # space again: the same batch commits
    assert [i.error for i in items] == [None, None]
    assert len(store.load_history("b", 0)) == 1
    store.close()


def test_a_value_the_database_refuses_fails_alone_in_a_batch(journal_url: str) -> None:
    """A NUL byte in a record's text: PostgreSQL cannot store it (its caller's StoreError,
    as when it writes alone), SQLite stores it; either way its batch sibling commits."""
    store: Any = open_store(journal_url, FakeClock())
    tokens = _claimed(store, *("a", "b"))
    items = [
        Append("a", tokens["a"], [rec("0", output='"a\x00b"')], (), durable=True),
        Append("b", tokens["b"], [rec("0")], (), durable=True),
    ]
    store._append_many(items)
    stored = len(store.load_history("a", 0))
    assert (stored, items[0].error) == (1, None) or (stored == 0 and "NUL" in str(items[0].error))
    assert items[1].error is None
    assert [r.position for r in store.load_history("b", 0)] == ["0"]
    store.close()


@pytest.mark.postgres
def test_a_postgres_batch_of_steps_is_pipelined_and_falls_back_on_a_refusal(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from durably.store.history import History

    store: Any = open_store(pg_url, FakeClock())
    tokens = _claimed(store, "a", "b", "c")
    slow: list[int] = []
    real = History._append_many
    monkeypatch.setattr(History, "_append_many", lambda s, items: slow.append(1) or real(s, items))

    def step(run_id: str, pos: str, token: int) -> Append:
        ev = new_event("step.completed", pos, {}, 1.0, f"t{token}:{pos}:step.completed")
        return Append(run_id, token, [rec(pos)], (ev,), durable=True)

    batch = [step(r, "0", tokens[r]) for r in ("a", "b", "c")]
    store._append_many(batch)
    assert slow == []  # one pipelined transaction, not a savepoint per append
    assert [(i.result, i.error) for i in batch] == [(False, None)] * 3
    again = [step("a", "1", tokens["a"]), step("b", "1", tokens["b"] + 1)]  # b: stale
    store._append_many(again)
    assert slow == [1]  # rolled back, then written append by append
    assert again[0].error is None and isinstance(again[1].error, LeaseLost)
    assert [r.position for r in store.load_history("a", 0)] == ["0", "1"]
    assert [r.position for r in store.load_history("b", 0)] == ["0"]
    kinds = [e.kind for e in store.read_events("a", 0, 100).events]
    assert kinds.count("step.completed") == 2
    store.close()


@pytest.mark.postgres
def test_postgres_batches_citing_shared_blobs_lock_them_in_one_order(pg_url: str) -> None:
    """Was: a batch wrote each record's blobs just before that record, in run order, so
    two batches citing stored blobs A and B through runs in opposite orders locked the
    two rows in opposite orders (citing a stored blob takes its row's lock, put_blob),
    and PostgreSQL killed one transaction as a deadlock (retried: a second's stall, and
    in a busy fleet a storm of them). Every
    batch now writes all its blobs first, in digest order. The interleaving is forced: a
    third session holds A's row lock until both batches wait, batch X having asked for A
    first, batch Y having taken B already."""
    import psycopg

    store: Any = open_store(pg_url, FakeClock())
    tokens = _claimed(store, "a", "b", "c", "d", "seed")
    blob = {k: hashlib.sha256(f'"{k}"'.encode()).hexdigest() for k in ("A", "B")}

    def citing(run_id: str, pos: str, *keys: str) -> Append:
        cited = tuple((blob[k], f'"{k}"') for k in keys)
        return Append(run_id, tokens[run_id], [rec(pos).replace(blobs=cited)], (), durable=True)

    store.append(
        "seed", tokens["seed"], [rec("0").replace(blobs=tuple((blob[k], f'"{k}"') for k in "AB"))]
    )
    x = [citing("a", "0", "A"), citing("b", "0", "B")]  # run order: A, then B
    y = [citing("c", "0", "B"), citing("d", "0", "A")]  # run order: B, then A

    def deadlocks() -> int:
        with psycopg.connect(pg_url, autocommit=True) as probe:
            row = probe.execute(
                "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"
            ).fetchone()
        return int(row[0]) if row else 0

    before = deadlocks()
    with psycopg.connect(pg_url) as holder:
        holder.execute("SELECT 1 FROM blobs WHERE digest = %s FOR UPDATE", (blob["A"],))
        errors: list[BaseException] = []

        def write(batch: list[Append]) -> None:
            try:
                store._append_many(batch)
            except BaseException as exc:  # collected: a thread's error is the test's
                errors.append(exc)

        def waiting() -> int:
            with psycopg.connect(pg_url, autocommit=True) as probe:
                row = probe.execute(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE wait_event_type = 'Lock' AND datname = current_database()"
                ).fetchone()
            return int(row[0]) if row else 0

        tx = threading.Thread(target=write, args=(x,))
        tx.start()
        deadline = time.monotonic() + 30
        while waiting() < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        ty = threading.Thread(target=write, args=(y,))
        ty.start()
        # Y waits too: on A behind X (digest order), or, before the fix, on A after
        # taking B. Either way two sessions wait on the holder's lock.
        while waiting() < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        holder.rollback()  # release A: X takes it, then needs B
    tx.join(30)
    ty.join(30)
    assert errors == []
    # PostgreSQL's own count (the store retries a transaction killed as a deadlock, so
    # the callers alone would see only a second's delay: deadlock_timeout).
    assert deadlocks() == before
    failed = [(i.run_id, i.error) for i in (*x, *y) if i.error is not None]
    assert failed == []
    for run_id in ("a", "b", "c", "d"):
        assert [r.position for r in store.load_history(run_id, 0)] == ["0"]
    store.close()


def test_a_sqlite_batch_of_steps_takes_no_savepoint_and_falls_back_on_a_refusal(
    tmp_path: Path,
) -> None:
    """A batch of step appends (one record each, no blobs) is written as the lone quick
    append writes one, without a savepoint each; a stale member rolls it back and the
    savepoint path writes it, failing that member alone. Both journals alike: cursors
    without a gap, each step's events once."""
    store: Any = open_store(f"sqlite:///{tmp_path / 'j.db'}", FakeClock())
    tokens = _claimed(store, "a", "b", "c")
    said: list[str] = []
    store._live().set_trace_callback(said.append)

    def step(run_id: str, pos: str, token: int) -> Append:
        ev = new_event("step.completed", pos, {}, 1.0, f"t{token}:{pos}:step.completed")
        return Append(run_id, token, [rec(pos)], (ev,), durable=True)

    batch = [step(r, "0", tokens[r]) for r in ("c", "a", "b")]
    store._append_many(batch)
    assert [(i.result, i.error) for i in batch] == [(False, None)] * 3
    assert not [s for s in said if "SAVEPOINT" in s.upper()]
    assert [s.strip().upper() for s in said].count("COMMIT") == 1
    said.clear()
    again = [step("a", "1", tokens["a"]), step("b", "1", tokens["b"] + 1)]  # b: stale
    store._append_many(again)
    assert [s for s in said if "SAVEPOINT" in s.upper()]  # rolled back, then one by one
    assert again[0].error is None and isinstance(again[1].error, LeaseLost)
    assert [r.position for r in store.load_history("a", 0)] == ["0", "1"]
    assert [r.position for r in store.load_history("b", 0)] == ["0"]
    for run_id, completed in (("a", 2), ("b", 1), ("c", 1)):
        events = store.read_events(run_id, 0, 100).events
        assert [e.kind for e in events].count("step.completed") == completed
        cursors = [e.cursor for e in events]
        assert cursors == list(range(1, len(cursors) + 1)), (run_id, cursors)
    store.close()


def test_a_batch_member_whose_value_cannot_be_bound_fails_alone(journal_url: str) -> None:
    """Was: the savepoint-free batches (SQLite's one transaction, PostgreSQL's pipeline)
    fell back to the savepoint path only on the driver's database errors, so a value the
    driver cannot bind that is no database error (a lone surrogate: UnicodeEncodeError)
    escaped the batch and was every member's error. The savepoint path, and an append
    alone, make it its own caller's."""
    from durably.events import NewEvent

    store: Any = open_store(journal_url, FakeClock())
    tokens = _claimed(store, "a", "b")
    bad = NewEvent("step.completed", "0", '{"x":"\ud800"}', 1.0, "a:0:bad")
    items = [
        Append("a", tokens["a"], [rec("0")], (bad,), durable=True),
        Append("b", tokens["b"], [rec("0")], (), durable=True),
    ]
    store._append_many(items)
    assert isinstance(items[0].error, UnicodeEncodeError)
    assert items[1].error is None
    assert store.load_history("a", 0) == []
    assert [r.position for r in store.load_history("b", 0)] == ["0"]
    store.close()


def test_a_sqlite_batch_numbers_one_runs_appends_and_many_events_without_a_gap(
    tmp_path: Path,
) -> None:
    """Two appends of one run in a batch (stable run order, no savepoint between them),
    one with more events than one INSERT takes (_write_events numbers them) and one of
    them stored already: every event once, cursors without a gap, both records."""
    store: Any = open_store(f"sqlite:///{tmp_path / 'j.db'}", FakeClock())
    tokens = _claimed(store, "a", "b")
    many = [new_event("x", "1", {"k": k}, 1.0, f"a:1:{k}") for k in range(12)]
    store.append("a", tokens["a"], [rec("0")], [many[5]])  # one stored already
    items = [
        Append("b", tokens["b"], [rec("0")], (new_event("y", "0", {}, 1.0, "b:0"),), True),
        Append("a", tokens["a"], [rec("1")], many, durable=True),
        Append("a", tokens["a"], [rec("2")], (new_event("z", "2", {}, 1.0, "a:2"),), True),
    ]
    store._append_many(items)
    assert [i.error for i in items] == [None, None, None]
    assert [r.position for r in store.load_history("a", 0)] == ["0", "1", "2"]
    events = store.read_events("a", 0, 100).events
    assert [e.cursor for e in events] == list(range(1, len(events) + 1))
    kinds = [e.kind for e in events]
    assert (kinds.count("x"), kinds.count("z"), kinds[-1]) == (12, 1, "z")
    store.close()


def test_a_sqlite_batch_whose_begin_is_busy_is_every_callers_busy(tmp_path: Path) -> None:
    """Another connection holds the write lock past the busy timeout: the batch's BEGIN
    fails, every member's StoreBusy (the leader raises it to all), nothing is written, and
    the same batch commits once the lock is free."""
    import sqlite3

    path = tmp_path / "j.db"
    store: Any = open_store(f"sqlite:///{path}", FakeClock(), busy_timeout_s=0.05)
    tokens = _claimed(store, "a", "b")
    items = [Append(r, tokens[r], [rec("0")], (), durable=True) for r in ("a", "b")]
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    with pytest.raises(StoreBusy):
        store._append_many(items)
    other.execute("ROLLBACK")
    other.close()
    assert not store._live().in_transaction
    store._append_many(items)
    assert [i.error for i in items] == [None, None]
    assert [len(store.load_history(r, 0)) for r in ("a", "b")] == [1, 1]
    store.close()


def test_threaded_appends_with_stale_members_commit_the_rest_once(tmp_path: Path) -> None:
    """Real threads on one SQLite file: each run appends steps with their events, and
    every fourth append of some runs carries a stale token. Each stale append is its own
    LeaseLost; every other record and event is stored once, cursors without a gap."""
    store: Any = open_store(f"sqlite:///{tmp_path / 'j.db'}", FakeClock())
    runs = [f"r{k:02d}" for k in range(24)]
    tokens = _claimed(store, *runs)
    start = threading.Barrier(len(runs))
    outcome: dict[str, list[tuple[str, bool]]] = {r: [] for r in runs}

    def drive(run_id: str) -> None:
        start.wait()
        for i in range(30):
            stale = run_id < "r08" and i % 4 == 3
            token = tokens[run_id] + (1 if stale else 0)
            n = 1 + i % 11  # past one INSERT's events now and then
            evs = [new_event("e", str(i), {"j": j}, 1.0, f"{run_id}:{i}:{j}") for j in range(n)]
            try:
                store.append(run_id, token, [rec(str(i))], evs)
                outcome[run_id].append(("ok", stale))
            except LeaseLost:
                outcome[run_id].append(("lost", stale))

    threads = [threading.Thread(target=drive, args=(r,)) for r in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert store._group.batches > 0  # batches happened
    for run_id in runs:
        assert all((kind == "lost") == stale for kind, stale in outcome[run_id]), run_id
        kept = [i for i in range(30) if not (run_id < "r08" and i % 4 == 3)]
        stored = sorted(int(r.position) for r in store.load_history(run_id, 0))
        assert stored == kept, run_id
        events = store.read_events(run_id, 0, 10_000).events
        assert [e.cursor for e in events] == list(range(1, len(events) + 1))
        assert sum(e.kind == "e" for e in events) == sum(1 + i % 11 for i in kept)
    store.close()


def test_a_leader_interrupted_inside_a_sqlite_batch_leaves_nothing_and_requeues_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A caller finding the writer idle takes the queued appends with its own, and its
    thread is interrupted halfway through the savepoint-free batch: the transaction is
    rolled back (nothing of the batch stored, the connection out of it), only that caller
    raises, the others' appends are back in the queue, and the next caller writes them
    once, their events numbered without a gap."""
    from durably.store.sqlite import SQLiteStore

    store: Any = open_store(f"sqlite:///{tmp_path / 'j.db'}", FakeClock())
    tokens = _claimed(store, "a", "b", "c")

    def step(run_id: str, pos: str) -> Append:
        ev = new_event("step.completed", pos, {}, 1.0, f"{run_id}:{pos}:done")
        return Append(run_id, tokens[run_id], [rec(pos)], (ev,), durable=True)

    real = SQLiteStore._events_at_once
    calls: list[str] = []

    def crash_second(self: Any, c: Any, run_id: str, events: Any) -> bool:
        calls.append(run_id)
        if len(calls) == 2:
            raise _Crash("interrupted")
        return bool(real(self, c, run_id, events))

    monkeypatch.setattr(SQLiteStore, "_events_at_once", crash_second)
    queued = [step("a", "0"), step("c", "0")]
    store._group._queue = list(queued)  # their callers woken, not yet running
    with pytest.raises(_Crash):
        store._group.submit(step("b", "0"))
    assert not store._live().in_transaction
    assert [store.load_history(r, 0) for r in ("a", "b", "c")] == [[], [], []]
    assert store._group._queue == queued and not store._group._busy
    assert not any(q.done or q.error for q in queued)
    monkeypatch.setattr(SQLiteStore, "_events_at_once", real)
    assert store._group.submit(step("b", "0")) is False
    assert all(q.done and q.error is None for q in queued)
    for run_id in ("a", "b", "c"):
        assert [r.position for r in store.load_history(run_id, 0)] == ["0"]
        events = store.read_events(run_id, 0, 100).events
        assert [e.cursor for e in events] == list(range(1, len(events) + 1))
        assert [e.kind for e in events].count("step.completed") == 1
    store.close()


def test_an_effects_mode_sqlite_batch_fsyncs_only_when_a_member_is_durable(
    tmp_path: Path,
) -> None:
    """Effects mode: a batch of pure steps commits at NORMAL, one with a durable member at
    FULL (its fsync carries the others), as the savepoint path's commit would."""
    store: Any = open_store(f"sqlite:///{tmp_path / 'j.db'}", FakeClock(), durability="effects")
    tokens = _claimed(store, "a", "b")
    said: list[str] = []
    store._live().set_trace_callback(said.append)

    def level() -> str:
        return str(store._live().execute("PRAGMA synchronous").fetchone()[0])

    pure = [Append(r, tokens[r], [rec("0")], (), durable=False) for r in ("a", "b")]
    store._append_many(pure)
    assert level() == "1"  # NORMAL
    mixed = [Append("a", tokens["a"], [rec("1")], (), durable=False)]
    mixed.append(Append("b", tokens["b"], [rec("1")], (), durable=True))
    store._append_many(mixed)
    assert level() == "2"  # FULL
    assert [i.error for i in (*pure, *mixed)] == [None] * 4
    assert not [s for s in said if "SAVEPOINT" in s.upper()]
    store.close()


def test_a_sqlite_batch_resending_a_committed_append_writes_nothing_twice(
    tmp_path: Path,
) -> None:
    """An append sent again after a commit whose outcome was unknown, in a batch: its
    record is stored identically and its events are stored already (a dedupe skipped:
    the batch rolls back and the savepoint path writes it), so it succeeds changing
    nothing, and its sibling's record and events are stored once."""
    store: Any = open_store(f"sqlite:///{tmp_path / 'j.db'}", FakeClock())
    tokens = _claimed(store, "a", "b")

    def step(run_id: str, pos: str) -> Append:
        evs = [new_event(k, pos, {}, 1.0, f"{run_id}:{pos}:{k}") for k in ("s", "d")]
        return Append(run_id, tokens[run_id], [rec(pos)], evs, durable=True)

    store._append_many([step("a", "0"), step("b", "0")])
    before = store.read_events("a", 0, 100).events
    again = [step("a", "0"), step("b", "1")]
    store._append_many(again)
    assert [i.error for i in again] == [None, None]
    assert store.read_events("a", 0, 100).events == before
    assert [r.position for r in store.load_history("b", 0)] == ["0", "1"]
    events = store.read_events("b", 0, 100).events
    assert [e.cursor for e in events] == list(range(1, len(events) + 1))
    assert [e.position for e in events if e.kind in ("s", "d")] == ["0", "0", "1", "1"]
    store.close()


def test_a_commit_wakes_the_oldest_queued_caller_to_lead_and_the_rest_once_done() -> None:
    """Each queued caller sleeps on its own lock: when a commit ends the oldest queued one
    is told to lead the next batch and the others sleep on until their commit (a shared
    Condition woke all of them after every commit to find that one may go on)."""
    led_by: list[str] = []
    names: dict[int, str] = {}

    def write_many(items: Sequence[Append]) -> None:
        led_by.append(names[threading.get_ident()])

    held = _Held(write_many)
    calls = held.call

    def call(run_id: str, committed: threading.Event) -> None:
        names[threading.get_ident()] = run_id
        calls(run_id, committed)

    held.call = call  # type: ignore[method-assign]
    leader = threading.Thread(target=held.call, args=("r0", threading.Event()))
    leader.start()
    assert held.started.wait(10)
    followers = []
    for k in (1, 2, 3):  # queued in this order
        t = threading.Thread(target=held.call, args=(f"r{k}", threading.Event()))
        t.start()
        followers.append(t)
        while len(held.group._queue) < k:
            time.sleep(0.001)
    waiters = [q.waiter for q in held.group._queue]
    assert all(w is not None and w.lock.locked() and not w.lead for w in waiters)
    held.release.set()
    for t in [leader, *followers]:
        t.join(10)
    assert led_by == ["r1"]  # the oldest queued caller led the batch
    assert [w.lead for w in waiters if w is not None] == [True, False, False]
    assert set(held.returned) == {"r0", "r1", "r2", "r3"}
    assert held.group._queue == [] and not held.group._busy


def test_a_caller_interrupted_once_told_to_lead_hands_the_lead_on() -> None:
    """A KeyboardInterrupt reaching a queued caller just as it is told to lead (raised as
    its lock's acquire returns, where CPython raises a SIGINT that arrived meanwhile): it
    withdraws its own append and the next queued caller leads, or the writer would stay
    busy for a leader that never comes and every later append would wait forever."""
    batches: list[list[str]] = []
    held = _Held(lambda items: batches.append(sorted(i.run_id for i in items)))
    leader = threading.Thread(target=held.call, args=("r0", threading.Event()))
    leader.start()
    assert held.started.wait(10)
    main = threading.main_thread()

    def interrupt_as_woken(frame: Any, event: str, arg: Any) -> None:
        if (
            event == "c_return"
            and threading.current_thread() is main
            and getattr(arg, "__name__", "") == "acquire"
            and frame.f_code.co_name == "submit"
        ):
            raise KeyboardInterrupt

    def queue_next() -> None:
        while not held.group._queue:  # the main thread's append first
            time.sleep(0.001)
        held.call("next", threading.Event())

    follower = threading.Thread(target=queue_next)
    follower.start()

    def let_go() -> None:
        while len(held.group._queue) < 2:
            time.sleep(0.001)
        held.release.set()

    releaser = threading.Thread(target=let_go)
    releaser.start()
    sys.setprofile(interrupt_as_woken)
    try:
        with pytest.raises(KeyboardInterrupt):
            held.group.submit(_item("gone"))
    finally:
        sys.setprofile(None)
    for t in (leader, follower, releaser):
        t.join(10)
    assert not follower.is_alive()
    # "gone" was told to lead, was interrupted, and handed the lead to "next", which
    # wrote its own append alone; nothing of "gone" was written.
    assert held.returned["next"] == (False, False)
    assert batches == []
    assert held.group._queue == [] and not held.group._busy and held.group._turn is None


def test_an_event_loops_appends_queued_behind_a_commit_wake_their_thread_once() -> None:
    """submit_all while a commit is in progress queues the loop's appends under one
    waiter: the leader that takes them (it takes the whole queue) wakes the loop's
    thread once, with every item's outcome set."""
    batches: list[list[str]] = []

    def write_many(items: Sequence[Append]) -> None:
        batches.append(sorted(i.run_id for i in items))
        for i in items:
            i.result = i.run_id == "b"

    held = _Held(write_many)
    leader = threading.Thread(target=held.call, args=("r0", threading.Event()))
    leader.start()
    assert held.started.wait(10)
    mine = [_item("a"), _item("b")]
    loop_thread = threading.Thread(target=held.group.submit_all, args=(mine,))
    loop_thread.start()
    while len(held.group._queue) < 2:
        time.sleep(0.001)
    assert mine[0].waiter is mine[1].waiter is not None
    held.release.set()
    leader.join(10)
    loop_thread.join(10)
    assert not loop_thread.is_alive()
    assert batches == [["a", "b"]]
    assert [(i.done, i.result, i.error) for i in mine] == [(True, False, None), (True, True, None)]
    assert held.group._queue == [] and not held.group._busy
