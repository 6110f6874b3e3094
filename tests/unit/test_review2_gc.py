"""Review 2 of group commit: a leader interrupted (a SIGINT raised at a loop's back edge,
where CPython checks the eval breaker) while it marks its batch done, with one thread's
``submit_all`` appends (an event loop's async runs: one waiter for several appends) in
that batch. Some of that thread's appends are marked done and its waiter woken; the
rest went back to the queue under the same, already woken, waiter. The next hand-on
releases that waiter's lock again (``RuntimeError: release unlocked lock``), or, when
the woken thread got there first, tells a thread that has left to lead: the writer stays
busy for nobody and every later append hangs. The thread was also told its appends not
yet marked done had succeeded, their outcome reset before it was known."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from durably.clock import FakeClock
from durably.store.groupcommit import Append
from durably.store.open import open_store

from ..contract.test_store_contract import rec
from .test_group_commit_shared import _claimed, _HeldWriter

GC_FILE = "groupcommit.py"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Any]:
    s: Any = open_store(f"sqlite:///{tmp_path / 'j.db'}", FakeClock())
    yield s
    s.close()


class _InterruptAtLine:
    """On the main thread: a KeyboardInterrupt raised as the ``nth`` execution of the
    line of ``_lead`` that starts with ``text`` begins (for a line inside a ``for`` loop
    from its second pass on, the place where a SIGINT that arrived during the pass before
    is raised: the loop's back edge checks the eval breaker)."""

    def __init__(self, text: str, nth: int) -> None:
        import inspect

        from durably.store import groupcommit

        lines, first = inspect.getsourcelines(groupcommit.GroupCommit._lead)
        hits = [first + i for i, line in enumerate(lines) if line.strip().startswith(text)]
        assert len(hits) == 1, hits
        self.line, self.nth, self.seen, self.fired = hits[0], nth, 0, False

    def _trace(self, frame: Any, event: str, arg: Any) -> Any:
        if frame.f_code.co_filename.endswith(GC_FILE) and frame.f_code.co_name == "_lead":
            return self._local
        return None

    def _local(self, frame: Any, event: str, arg: Any) -> Any:
        if event == "line" and frame.f_lineno == self.line and not self.fired:
            self.seen += 1
            if self.seen == self.nth:
                self.fired = True
                raise KeyboardInterrupt
        return self._local

    def __enter__(self) -> _InterruptAtLine:
        sys.settrace(self._trace)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.settrace(None)


@pytest.mark.parametrize("nth", [2, 3, 4])
def test_a_leader_interrupted_while_marking_a_submit_all_group_done(store: Any, nth: int) -> None:
    tokens = {r: _claimed(store, r) for r in ("a", "b", "c", "d")}
    held = _HeldWriter(store)
    held.start("lone", lambda: store.append("a", tokens["a"], [rec("0")]))
    assert held.started.wait(10)
    group = [Append(r, tokens[r], [rec("0")], [], durable=True) for r in ("b", "c", "d")]

    def orchestrate() -> None:
        held.queued(1)  # the main thread's append, told to lead the next batch
        held.start("group", lambda: store.append_all(group))  # one waiter, 3 appends
        held.queued(4)
        held.go.set()

    helper = threading.Thread(target=orchestrate)
    helper.start()
    # The batch is [main, b, c, d]: interrupted as it marks the nth one done, the ones
    # before it marked, the rest not.
    with _InterruptAtLine("queued.done = True", nth) as hook:
        try:
            store.append("a", tokens["a"], [rec("1")])
            got: BaseException | None = None
        except BaseException as exc:
            got = exc
    assert hook.fired
    # The leader's caller gets its interrupt (not an error of group commit's own).
    assert isinstance(got, KeyboardInterrupt), repr(got)
    helper.join(10)
    for t in held.threads:
        t.join(10)
    assert not any(t.is_alive() for t in held.threads), "the submit_all thread hangs"
    assert not isinstance(held.results.get("group"), BaseException), held.results["group"]

    # Every later append goes through: the writer was handed on, not left with nobody.
    later = threading.Thread(target=store.append, args=("a", tokens["a"], [rec("2")]), daemon=True)
    later.start()
    later.join(5)
    gc = store._group
    assert not later.is_alive(), (
        f"an append after the interrupt hangs: busy={gc._busy},"
        f" turn={getattr(gc._turn, 'run_id', None)}, queued={[q.run_id for q in gc._queue]}"
    )
    assert not gc._busy and not gc._queue
    # Each of the group's appends has an outcome that is true: committed, and said so.
    for item in group:
        assert item.done and item.error is None, (item.run_id, item.done, item.error)
        got = store.load_history(item.run_id, 0)
        assert [r.position for r in got] == ["0"], (item.run_id, got)


def test_a_failed_batch_interrupted_while_marked_done_is_not_acknowledged(
    store: Any, tmp_path: Path
) -> None:
    """The batch's transaction fails (the database busy: another process holds its
    writer lock), so each append's outcome is that StoreBusy; the leader is interrupted
    while marking them done. The submit_all thread's appends not yet marked had their
    error cleared as they went back to the queue, yet its waiter was woken: it was told
    they were written."""
    import sqlite3

    from durably.errors import StoreBusy

    tokens = {r: _claimed(store, r) for r in ("a", "b", "c", "d")}
    store._conn.execute("PRAGMA busy_timeout = 50")
    other = sqlite3.connect(str(tmp_path / "j.db"), isolation_level=None)
    real_many = store._group._write_many

    def busy_then_write(items: Any) -> None:
        # Another process takes the writer just as this batch begins.
        other.execute("BEGIN IMMEDIATE")
        try:
            real_many(items)
        finally:
            other.execute("ROLLBACK")

    store._group._write_many = busy_then_write
    held = _HeldWriter(store)
    held.start("lone", lambda: store.append("a", tokens["a"], [rec("0")]))
    assert held.started.wait(10)
    group = [Append(r, tokens[r], [rec("0")], [], durable=True) for r in ("b", "c", "d")]

    def orchestrate() -> None:
        held.queued(1)
        held.start("group", lambda: store.append_all(group))
        held.queued(4)
        held.go.set()

    helper = threading.Thread(target=orchestrate)
    helper.start()
    with _InterruptAtLine("queued.done = True", 3) as hook:
        try:
            store.append("a", tokens["a"], [rec("1")])
            got: BaseException | None = None
        except BaseException as exc:
            got = exc
    assert hook.fired
    helper.join(10)
    for t in held.threads:
        t.join(10)
    assert not any(t.is_alive() for t in held.threads), "the submit_all thread hangs"
    assert isinstance(got, KeyboardInterrupt), repr(got)
    for item in group:
        stored = store.load_history(item.run_id, 0)
        if not stored:  # never written: its caller must not be told it was
            assert isinstance(item.error, StoreBusy), (item.run_id, item.done, item.error)
    other.close()


def test_a_lone_stale_append_all_fails_its_item_alone(store: Any) -> None:
    """submit_all's promise: a stale token fails its item alone (its ``error``), nothing
    raised. Written alone (one append, nothing queued: _write_one), a stale token's
    LeaseLost (a BaseException) was taken for an interruption of the thread: raised out
    of append_all, so an event loop's flush failed every caller of that flush with a
    'shared commit was interrupted' StoreError and its callback died with LeaseLost (the
    loop's exception handler: 'Exception in callback LoopAppends._flush()')."""
    import asyncio

    from durably.errors import LeaseLost
    from durably.runtime.joincommit import LoopAppends

    token = _claimed(store, "a")
    item = Append("a", token + 1, [rec("0")], [], durable=True)
    store.append_all([item])  # raises nothing
    assert isinstance(item.error, LeaseLost)
    assert not store._group._busy and not store._group._queue

    async def main() -> tuple[BaseException | None, list[Any]]:
        loop = asyncio.get_running_loop()
        crashed: list[Any] = []
        loop.set_exception_handler(lambda _loop, ctx: crashed.append(ctx))
        appends = LoopAppends(loop, store)
        try:
            await appends.append("a", token + 1, [rec("1")], [])
        except BaseException as exc:
            return exc, crashed
        return None, crashed

    got, crashed = asyncio.run(main())
    assert isinstance(got, LeaseLost), repr(got)
    assert not crashed, crashed
