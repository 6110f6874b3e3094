"""Review of group commit's waiter queue and shared writes: a leader interrupted once
its batch is committed (a SIGINT arriving during the COMMIT's fsync is raised as the
statement returns) must not make its followers' creation, claim or finish run again."""

from __future__ import annotations

import signal
import sys
import threading
import time
import unittest.mock
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from durably.clock import FakeClock
from durably.events import new_event
from durably.store.groupcommit import Append
from durably.store.open import open_store
from durably.store.sqlite import SQLiteStore

from ..contract.test_store_contract import ME, alive, new_run, rec
from .test_group_commit_shared import _claimed, _events, _HeldWriter


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Any]:
    s: Any = open_store(f"sqlite:///{tmp_path / 'j.db'}", FakeClock())
    yield s
    s.close()


class _InterruptAfterCommit:
    """On the main thread: a KeyboardInterrupt raised where a SIGINT that arrived while
    the batch's COMMIT ran (its fsync) is raised, as ``c.execute("COMMIT")`` returns."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.last: list[str] = []
        self.fired = False
        store._live().set_trace_callback(self._trace)

    def _trace(self, sql: str) -> None:
        if threading.current_thread() is threading.main_thread():
            self.last[:] = [sql]

    def _profile(self, frame: Any, event: str, arg: Any) -> None:
        if (
            event == "c_return"
            and not self.fired
            and getattr(arg, "__name__", "") == "execute"
            and self.last == ["COMMIT"]
            and frame.f_code.co_name in ("_batched", "_writing")
        ):
            self.fired = True
            raise KeyboardInterrupt

    def __enter__(self) -> _InterruptAfterCommit:
        sys.setprofile(self._profile)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.setprofile(None)


def _lead_with(store: Any, token: int, queue_others: Any) -> dict[str, Any]:
    """The main thread's append queues first behind a held lone write (so it is told to
    lead the next batch); ``queue_others(held)`` queues the other calls behind it; the
    main thread is interrupted just after that batch's COMMIT."""
    held = _HeldWriter(store)
    held.start("lone", lambda: store.append("a", token, [rec("0")]))
    assert held.started.wait(10)

    def orchestrate() -> None:
        held.queued(1)  # the main thread's append
        queue_others(held)
        held.go.set()

    helper = threading.Thread(target=orchestrate)
    helper.start()
    got: BaseException | None = None
    with _InterruptAfterCommit(store) as hook:
        try:
            store.append("a", token, [rec("1")])
        except KeyboardInterrupt as exc:
            got = exc
    helper.join(10)
    held.release()
    assert hook.fired
    assert isinstance(got, KeyboardInterrupt)
    return held.results


def test_a_claim_committed_in_an_interrupted_leaders_batch_is_not_run_again(store: Any) -> None:
    token = _claimed(store, "a")
    store.create_run(new_run("c"))

    def others(held: _HeldWriter) -> None:
        held.start("claim", lambda: store.claim("c", ME, 30, 10, alive))
        held.queued(2)

    results = _lead_with(store, token, others)
    run = store.get_run("c")
    assert run.status == "running" and run.fencing_token == 1  # the claim committed
    claim = results["claim"]
    assert not isinstance(claim, BaseException), f"the committed claim's caller got {claim!r}"
    assert claim.fencing_token == 1


def test_a_create_committed_in_an_interrupted_leaders_batch_still_says_created(
    store: Any,
) -> None:
    token = _claimed(store, "a")

    def others(held: _HeldWriter) -> None:
        held.start("create", lambda: store.create_run(new_run("n")))
        held.queued(2)

    results = _lead_with(store, token, others)
    assert _events(store, "n") == ["run.created"]
    create = results["create"]
    assert not isinstance(create, BaseException), create
    assert create[1] is True, "the caller that created the run was told it existed already"


class _InterruptAt:
    """On the main thread: a KeyboardInterrupt raised as the C call ``name`` made by
    ``where`` (a function of groupcommit.py) returns, the place where CPython raises a
    SIGINT that arrived while that call ran (the eval breaker is checked after a CALL)."""

    def __init__(self, where: str, name: str) -> None:
        self.where, self.name, self.fired = where, name, False

    def _profile(self, frame: Any, event: str, arg: Any) -> None:
        if (
            event == "c_return"
            and not self.fired
            and getattr(arg, "__name__", "") == self.name
            and frame.f_code.co_name == self.where
            and frame.f_code.co_filename.endswith("groupcommit.py")
        ):
            self.fired = True
            raise KeyboardInterrupt

    def __enter__(self) -> _InterruptAt:
        sys.setprofile(self._profile)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.setprofile(None)


def _append_in_thread(store: Any, run_id: str, token: int, pos: str) -> threading.Thread:
    t = threading.Thread(target=store.append, args=(run_id, token, [rec(pos)]), daemon=True)
    t.start()
    return t


def test_an_interrupt_just_as_a_caller_queues_does_not_leave_the_writer_busy(
    store: Any,
) -> None:
    """SIGINT reaching the main thread as it queues its append (raised as the queue's
    append returns, before it sleeps on its waiter): its waiter is left in the queue with
    nobody on it. When the commit in progress ends, _hand_on tells that dead waiter to
    lead and keeps the writer busy for it: every later append waits forever."""
    tokens = {r: _claimed(store, r) for r in ("a", "b")}
    held = _HeldWriter(store)
    held.start("lone", lambda: store.append("a", tokens["a"], [rec("0")]))
    assert held.started.wait(10)
    with _InterruptAt("submit", "append") as hook, pytest.raises(KeyboardInterrupt):
        store.append("b", tokens["b"], [rec("0")])
    assert hook.fired
    held.release()
    later = _append_in_thread(store, "a", tokens["a"], "1")
    later.join(5)
    assert not later.is_alive(), (
        f"an append after the interrupt hangs: busy={store._group._busy},"
        f" queued={[q.run_id for q in store._group._queue]}"
    )


def test_an_interrupted_follower_whose_append_went_back_to_the_queue_does_not_hang_it(
    store: Any,
) -> None:
    """The main thread's append is in a leader's batch when its SIGINT arrives (it
    raises, not withdrawing what a leader took); the leader's own interruption (a
    BaseException) puts the others' appends back in the queue, the main thread's first:
    _hand_on tells its waiter, which nobody sleeps on any more, to lead."""
    tokens = {r: _claimed(store, r) for r in ("a", "b", "c")}

    class _Crash(BaseException):
        pass

    entered, crash = threading.Event(), threading.Event()
    real_batched = SQLiteStore._batched

    def batched(self: Any, ordered: Any) -> bool:
        if threading.current_thread() is not threading.main_thread() and not crash.is_set():
            entered.set()
            assert crash.wait(10)
            raise _Crash
        return bool(real_batched(self, ordered))

    held = _HeldWriter(store)
    held.start("lone", lambda: store.append("a", tokens["a"], [rec("0")]))
    assert held.started.wait(10)
    leader_out: list[BaseException] = []

    def leader() -> None:  # queued first: told to lead the next batch
        try:
            store.append("c", tokens["c"], [rec("0")])
        except BaseException as exc:
            leader_out.append(exc)

    with unittest.mock.patch.object(SQLiteStore, "_batched", batched):
        lt = threading.Thread(target=leader)
        lt.start()
        held.queued(1)
        main = threading.main_thread().ident
        assert main is not None

        def interrupt_main_then_crash_leader() -> None:
            held.queued(2)  # the main thread's append queued behind the leader's
            held.go.set()
            assert entered.wait(10)  # the leader took both into its batch
            signal.pthread_kill(main, signal.SIGINT)
            time.sleep(0.2)
            crash.set()

        helper = threading.Thread(target=interrupt_main_then_crash_leader)
        helper.start()
        with pytest.raises(KeyboardInterrupt):
            store.append("b", tokens["b"], [rec("0")])
        helper.join(10)
        lt.join(10)
    held.release()
    assert leader_out and isinstance(leader_out[0], _Crash)
    later = _append_in_thread(store, "a", tokens["a"], "1")
    later.join(5)
    assert not later.is_alive(), (
        f"an append after the interrupt hangs: busy={store._group._busy},"
        f" queued={[q.run_id for q in store._group._queue]}"
    )


class _InterruptAfterBegin:
    """On the main thread: a KeyboardInterrupt raised as the ``BEGIN`` of ``where`` (a
    SQLiteStore method) returns, where a SIGINT arriving while it ran is raised."""

    def __init__(self, store: Any, where: str) -> None:
        self.where, self.last, self.fired = where, [""], False
        store._live().set_trace_callback(self._trace)

    def _trace(self, sql: str) -> None:
        if threading.current_thread() is threading.main_thread():
            self.last[0] = sql

    def _profile(self, frame: Any, event: str, arg: Any) -> None:
        if (
            event == "c_return"
            and not self.fired
            and getattr(arg, "__name__", "") == "execute"
            and self.last[0].startswith("BEGIN")
            and frame.f_code.co_name == self.where
        ):
            self.fired = True
            raise KeyboardInterrupt

    def __enter__(self) -> _InterruptAfterBegin:
        sys.setprofile(self._profile)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.setprofile(None)


@pytest.mark.parametrize("where", ["_writing", "_append_quick", "_batched", "_reading"])
def test_an_interrupt_as_begin_returns_leaves_no_transaction_open(store: Any, where: str) -> None:
    """A SIGINT during BEGIN (IMMEDIATE waits for another process's writer) is raised as
    it returns, outside the try that rolls back: the connection stayed inside the
    transaction, holding the database's writer lock, and every later write of the store
    failed ("cannot start a transaction within a transaction")."""
    tokens = {r: _claimed(store, r) for r in ("a", "b")}
    ev = new_event("e", "0", {}, 1.0, "a:0:e")
    calls = {
        "_writing": lambda: store.create_run(new_run("w")),
        "_append_quick": lambda: store.append("a", tokens["a"], [rec("0")], [ev]),
        "_batched": lambda: store._append_many(
            [Append(r, tokens[r], [rec("0")], (), durable=True) for r in ("a", "b")]
        ),
        "_reading": lambda: store._reading(lambda tx: tx.one("get_run", run_id="a"), True),
    }
    with _InterruptAfterBegin(store, where) as hook, pytest.raises(KeyboardInterrupt):
        calls[where]()
    assert hook.fired
    assert not store._live().in_transaction
    store.append("a", tokens["a"], [rec("1")])  # the store still writes
