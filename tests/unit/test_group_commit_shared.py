"""Group commit carries a run's creation, claim and finish on SQLite (issue 28): written
apart, each took SQLite's one writer for a commit and an fsync of its own while the
batches waited. Queued behind a commit, they run in the next shared transaction, each in
a savepoint of its own: a write's own refusal is its own error; a batch that must be
written again (one of its appends refused) runs them again, from the start, once."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from durably.clock import FakeClock
from durably.errors import LeaseLost, RunNotFound
from durably.store.open import open_store

from ..contract.test_store_contract import ME, alive, new_run, rec


class _HeldWriter:
    """The store's next lone write is held before it writes, so that the calls started
    meanwhile queue behind it; ``release`` lets it go."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.started, self.go = threading.Event(), threading.Event()
        real = store._group._write_one

        def held(item: Any) -> bool:
            if not self.started.is_set():
                self.started.set()
                assert self.go.wait(10)
            return bool(real(item))

        store._group._write_one = held
        self.results: dict[str, Any] = {}
        self.threads: list[threading.Thread] = []

    def start(self, name: str, call: Callable[[], Any]) -> None:
        """Run ``call`` in a thread of its own; its value (or error) lands in results."""

        def body() -> None:
            try:
                self.results[name] = call()
            except BaseException as exc:
                self.results[name] = exc

        t = threading.Thread(target=body)
        t.start()
        self.threads.append(t)

    def queued(self, n: int) -> None:
        """Wait until ``n`` calls are queued behind the held write."""
        deadline = time.monotonic() + 10
        while len(self.store._group._queue) < n:
            assert time.monotonic() < deadline, "the calls never queued"
            time.sleep(0.001)

    def release(self) -> None:
        self.go.set()
        for t in self.threads:
            t.join(10)
        assert not any(t.is_alive() for t in self.threads)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Any]:
    s: Any = open_store(f"sqlite:///{tmp_path / 'j.db'}", FakeClock())
    yield s
    s.close()


def _events(store: Any, run_id: str) -> list[str]:
    rows = store._conn.execute(
        "SELECT kind FROM events WHERE run_id = ? ORDER BY cursor", (run_id,)
    ).fetchall()
    return [r[0] for r in rows]


def _claimed(store: Any, run_id: str) -> int:
    store.create_run(new_run(run_id))
    return int(store.claim(run_id, ME, 30, 10, alive).fencing_token)


def test_creations_and_claims_queued_behind_a_commit_share_the_next(store: Any) -> None:
    token = _claimed(store, "a")
    held = _HeldWriter(store)
    held.start("append", lambda: store.append("a", token, [rec("0")]))
    assert held.started.wait(10)
    held.start("b", lambda: store.create_run(new_run("b")))
    held.start("c", lambda: store.create_run(new_run("c")))
    held.queued(2)
    held.release()
    assert (store._group.batches, store._group.batched) == (1, 2)  # one shared commit
    for name in ("b", "c"):
        run, created = held.results[name]
        assert created is True and run.run_id == name and run.status == "queued"
        assert _events(store, name) == ["run.created"]
    assert held.results["append"] is False


def test_a_shared_writes_own_refusal_fails_it_alone(store: Any) -> None:
    token = _claimed(store, "a")
    held = _HeldWriter(store)
    held.start("append", lambda: store.append("a", token, [rec("0")]))
    assert held.started.wait(10)
    held.start("missing", lambda: store.claim("nobody", ME, 30, 10, alive))
    held.start("d", lambda: store.create_run(new_run("d")))
    held.start("a1", lambda: store.append("a", token, [rec("1")]))
    held.queued(3)
    held.release()
    assert store._group.batches == 1
    assert isinstance(held.results["missing"], RunNotFound)
    assert held.results["d"][1] is True
    assert held.results["a1"] is False
    assert [r.position for r in store.load_history("a", 0)] == ["0", "1"]


def test_a_batch_written_again_runs_its_shared_writes_again_from_the_start(store: Any) -> None:
    """An append refused in the batch (a stale token) rolls the quick transaction back;
    the savepoint path writes the batch again, and the creation, rolled back with it,
    is made once and still says it created the run."""
    token = _claimed(store, "a")
    stale = _claimed(store, "s")
    store.claim("s", ME, 30, 10, lambda _: True)  # taken again: the first token is stale
    held = _HeldWriter(store)
    held.start("append", lambda: store.append("a", token, [rec("0")]))
    assert held.started.wait(10)
    held.start("stale", lambda: store.append("s", stale, [rec("0")]))
    held.start("e", lambda: store.create_run(new_run("e")))
    held.queued(2)
    held.release()
    assert isinstance(held.results["stale"], LeaseLost)
    run, created = held.results["e"]
    assert created is True and run.run_id == "e"
    assert _events(store, "e") == ["run.created"]


def test_a_finish_queued_behind_a_commit_shares_it(store: Any) -> None:
    token_a, token_f = _claimed(store, "a"), _claimed(store, "f")
    held = _HeldWriter(store)
    held.start("append", lambda: store.append("a", token_a, [rec("0")]))
    assert held.started.wait(10)
    held.start("finish", lambda: store.finish("f", token_f, "completed", [rec("0")], '"done"'))
    held.start("a1", lambda: store.append("a", token_a, [rec("1")]))
    held.queued(2)
    held.release()
    assert store._group.batches == 1 and held.results["finish"] is None
    run = store.get_run("f")
    assert run.status == "completed" and run.outcome == '"done"'
    assert [r.position for r in store.load_history("f", 0)] == ["0"]
    assert _events(store, "f")[-1] == "run.completed"
