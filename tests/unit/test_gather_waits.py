"""Waits in ``ctx.gather`` branches run at the same time: a branch whose wait must park
ends with a park of its own while its siblings go on live, and the gather parks the run
once on all of them (the earliest wake time, any waited signal, any request decided).

Every test runs on a FakeClock on both stores (``engine.run`` waiting in-process moves
the clock instead of sleeping), so nothing here sleeps.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import durably
from durably.approvals import approval_digest
from durably.history import COMPENSATE, HALT

MIN = 60.0


@pytest.fixture
def clock() -> durably.FakeClock:
    return durably.FakeClock()


@pytest.fixture
def engine(journal_url: str, clock: durably.FakeClock) -> Iterator[durably.Engine]:
    e = durably.Engine(journal_url, clock=clock, park_wait_s=0)
    yield e
    e.close()


def parks(engine: durably.Engine, run_id: str) -> list[dict[str, Any]]:
    return [e.data for e in engine.events(run_id).events if e.kind == "run.parked"]


def waiting(engine: durably.Engine, run_id: str) -> dict[str, tuple[str, str | None]]:
    return {r.position: (r.status, r.output) for r in engine.history(run_id) if r.kind != "step"}


def test_two_timers_wake_once_after_the_longer_not_the_sum(
    journal_url: str, clock: durably.FakeClock
) -> None:
    with durably.Engine(journal_url, clock=clock) as engine:  # engine.run waits in-process

        @engine.workflow(name="wf")
        async def wf(ctx: durably.AsyncContext) -> list[Any]:
            return await ctx.gather(ctx.sleep(MIN), ctx.sleep(MIN))

        start = clock.time()
        assert engine.run(wf, run_id="r") == [None, None]
        assert clock.time() == start + MIN  # not 120 s: the timers ran at the same time
        [parked] = parks(engine, "r")  # one park, on both timers
        assert parked["kind"] == "waits" and parked["wake_at"] == start + MIN
        assert parked["reason"].startswith("2 waits: timer until ")


def test_a_step_beside_a_timer_runs_before_the_park(
    engine: durably.Engine, clock: durably.FakeClock
) -> None:
    ran: list[str] = []

    @engine.workflow(name="wf")
    async def wf(ctx: durably.AsyncContext) -> list[Any]:
        return await ctx.gather(
            ctx.sleep(MIN), ctx.step("llm", lambda: ran.append("llm") or "answer")
        )

    start = clock.time()
    with pytest.raises(durably.RunParked):
        engine.run(wf, run_id="r")
    assert ran == ["llm"]  # ran live beside the timer, before the run parked
    run = engine.get_run("r")
    # One wait left: the run parks exactly as on a top-level timer.
    assert run.status == "parked" and run.wake_at == start + MIN
    assert parks(engine, "r")[0]["kind"] == "timer"
    clock.advance(MIN)
    assert engine.resume("r") == [None, "answer"]
    assert ran == ["llm"]  # replayed on wake, never run again


def test_two_requests_are_pending_at_once_and_either_order_decides(
    engine: durably.Engine,
) -> None:
    @engine.workflow(name="wf")
    async def wf(ctx: durably.AsyncContext) -> list[Any]:
        got = await ctx.gather(
            ctx.request_approval("refund", {"n": 1}), ctx.request_approval("ship", {"n": 2})
        )
        return [d.outcome for d in got]

    with pytest.raises(durably.RunParked):
        engine.run(wf, run_id="r")
    pending = engine.pending_approvals("r")
    assert [(p.request_id, p.action) for p in pending] == [("0.0.0", "refund"), ("0.1.0", "ship")]
    assert parks(engine, "r")[0]["kind"] == "waits"
    engine.approve("r", "0.1.0", digest=approval_digest("ship", {"n": 2}))  # the second first
    assert engine.get_run("r").wake_at is not None  # deciding it woke the run
    with pytest.raises(durably.RunParked):
        engine.resume("r")  # the second is recorded; the first parks again, same request
    [left] = engine.pending_approvals("r")
    assert (left.request_id, left.requested_at) == ("0.0.0", pending[0].requested_at)
    engine.reject("r", "0.0.0", digest=approval_digest("refund", {"n": 1}), reason="no")
    assert engine.resume("r") == ["rejected", "approved"]


def test_a_signal_of_either_wait_wakes_the_run(engine: durably.Engine) -> None:
    @engine.workflow(name="wf")
    async def wf(ctx: durably.AsyncContext) -> list[Any]:
        return await ctx.gather(ctx.wait_for_signal("x"), ctx.wait_for_signal("y"))

    with pytest.raises(durably.RunParked):
        engine.run(wf, run_id="r")
    assert engine.get_run("r").wake_at is None  # no timeouts: only a signal wakes it
    engine.signal("r", "y", "for y")
    assert engine.get_run("r").wake_at is not None
    with pytest.raises(durably.RunParked):
        engine.resume("r")  # y is recorded; x parks again (a plain signal park now)
    assert parks(engine, "r")[-1]["kind"] == "signal"
    engine.signal("r", "x", "for x")
    assert engine.resume("r") == ["for x", "for y"]


def test_one_branch_signal_and_another_branch_timer(
    engine: durably.Engine, clock: durably.FakeClock
) -> None:
    @engine.workflow(name="wf")
    async def wf(ctx: durably.AsyncContext) -> list[Any]:
        return await ctx.gather(ctx.wait_for_signal("x", timeout_s=10 * MIN), ctx.sleep(MIN))

    start = clock.time()
    with pytest.raises(durably.RunParked):
        engine.run(wf, run_id="r")
    run = engine.get_run("r")
    assert run.wake_at == start + MIN  # the earliest of the timer and the signal's timeout
    assert "2 waits: signal 'x' since" in (run.park_reason or "")
    clock.advance(5)
    engine.signal("r", "x", "early")
    with pytest.raises(durably.RunParked):
        engine.resume("r")  # the signal is recorded; the timer parks at its recorded time
    assert engine.get_run("r").wake_at == start + MIN
    clock.advance(MIN)
    assert engine.resume("r") == ["early", None]


def test_a_new_engine_resumes_both_waits_at_their_recorded_times(
    journal_url: str, clock: durably.FakeClock
) -> None:
    def register(engine: durably.Engine) -> durably.Workflow:
        @engine.workflow(name="wf")
        async def wf(ctx: durably.AsyncContext) -> list[Any]:
            return await ctx.gather(ctx.sleep(MIN), ctx.wait_for_signal("x", timeout_s=3 * MIN))

        return wf

    start = clock.time()
    with durably.Engine(journal_url, clock=clock, park_wait_s=0) as first:
        with pytest.raises(durably.RunParked):
            first.run(register(first), run_id="r")
    clock.advance(MIN)  # the process is gone; later, another starts on the same journal
    with durably.Engine(journal_url, clock=clock, park_wait_s=0) as second:
        register(second)
        with pytest.raises(durably.RunParked):
            second.resume("r")  # the timer is over; the signal wait keeps its deadline
        run = second.get_run("r")
        assert run.wake_at == start + 3 * MIN  # recorded when first reached, not fresh
        assert "2 waits" not in (run.park_reason or "")
    clock.advance(2 * MIN)
    with durably.Engine(journal_url, clock=clock) as third:
        register(third)
        assert third.resume("r") == [None, None]  # timed out: the default


def test_cancel_while_parked_on_two_waits_ends_cancelled(
    engine: durably.Engine, clock: durably.FakeClock
) -> None:
    ran: list[str] = []

    @engine.workflow(name="wf")
    async def wf(ctx: durably.AsyncContext) -> Any:
        await ctx.gather(ctx.sleep(MIN), ctx.wait_for_signal("x"))
        return await ctx.step("after", lambda: ran.append("after"))

    with pytest.raises(durably.RunParked):
        engine.run(wf, run_id="r")
    assert (engine.get_run("r").park_reason or "").startswith("2 waits: timer until ")
    run = engine.cancel("r", reason="stop waiting")
    assert run.status == "parked" and run.wake_at is not None and run.wake_at <= clock.time()
    with pytest.raises(durably.Cancelled, match="stop waiting"):
        engine.resume("r")
    assert engine.get_run("r").status == "cancelled" and ran == []
    assert HALT in [r.kind for r in engine.history("r")]


def test_nested_gathers_park_once_on_every_wait(
    engine: durably.Engine, clock: durably.FakeClock
) -> None:
    async def inner(ctx: durably.AsyncContext) -> list[Any]:
        return await ctx.gather(ctx.sleep(2 * MIN), ctx.wait_for_signal("x"))

    @engine.workflow(name="wf")
    async def wf(ctx: durably.AsyncContext) -> list[Any]:
        return await ctx.gather(inner(ctx), ctx.sleep(MIN))

    start = clock.time()
    with pytest.raises(durably.RunParked):
        engine.run(wf, run_id="r")
    run = engine.get_run("r")
    assert run.wake_at == start + MIN
    assert (run.park_reason or "").startswith("3 waits: timer until ")
    engine.signal("r", "x", "sent")
    with pytest.raises(durably.RunParked):
        engine.resume("r")  # x recorded; both timers park again at their recorded times
    assert engine.get_run("r").wake_at == start + MIN
    clock.advance(2 * MIN)
    assert engine.resume("r") == [[None, "sent"], None]


def test_a_failing_sibling_fails_the_gather_and_the_timer_record_survives(
    engine: durably.Engine, clock: durably.FakeClock
) -> None:
    def boom() -> None:
        raise ValueError("boom")

    @engine.workflow(name="wf")
    async def wf(ctx: durably.AsyncContext) -> list[Any]:
        return await ctx.gather(ctx.sleep(MIN), ctx.step("boom", boom))

    start = clock.time()
    with pytest.raises(durably.WorkflowFailed, match="boom"):
        engine.run(wf, run_id="r")
    assert engine.get_run("r").status == "failed"
    status, output = waiting(engine, "r")["0.0.0"]
    assert status == "waiting" and f'"wake_at":{start + MIN}' in (output or "").replace(" ", "")


def test_return_exceptions_parks_on_the_timer_and_returns_the_failure_on_wake(
    engine: durably.Engine, clock: durably.FakeClock
) -> None:
    ran: list[str] = []

    def boom() -> None:
        ran.append("boom")
        raise ValueError("boom")

    @engine.workflow(name="wf")
    async def wf(ctx: durably.AsyncContext) -> list[str]:
        got = await ctx.gather(ctx.sleep(MIN), ctx.step("boom", boom), return_exceptions=True)
        return [type(g).__name__ for g in got]

    with pytest.raises(durably.RunParked):
        engine.run(wf, run_id="r")
    assert ran == ["boom"]  # the failing step ran (and was recorded) before the park
    clock.advance(MIN)
    assert engine.resume("r") == ["NoneType", "StepFailed"]
    assert ran == ["boom"]


def test_a_branch_that_catches_its_park_cannot_go_on_live(engine: durably.Engine) -> None:
    ran: list[str] = []

    async def stubborn(ctx: durably.AsyncContext) -> str:
        try:
            await ctx.sleep(MIN)
        except BaseException:  # a bare catch of its own park: the point of the test
            pass
        return await ctx.step("after", lambda: ran.append("after") or "after")

    @engine.workflow(name="wf")
    async def wf(ctx: durably.AsyncContext) -> list[Any]:
        return await ctx.gather(stubborn(ctx), ctx.step("side", lambda: ran.append("side")))

    with pytest.raises(durably.RunParked):
        engine.run(wf, run_id="r")
    # The sibling went on live; the branch's own next recording call raised its park again.
    assert ran == ["side"]


def test_a_branch_turning_its_park_into_an_error_still_parks_without_compensating(
    engine: durably.Engine, clock: durably.FakeClock
) -> None:
    undone: list[str] = []

    async def branch(ctx: durably.AsyncContext) -> str:
        async with ctx.saga() as saga:
            await saga.step("book", lambda: "booked", lambda: undone.append("book"))
            try:
                await ctx.sleep(MIN)
            except BaseException:
                raise ValueError("turned the park into an error") from None
        return "done"

    @engine.workflow(name="wf")
    async def wf(ctx: durably.AsyncContext) -> list[Any]:
        return await ctx.gather(branch(ctx), ctx.sleep(2 * MIN))

    with pytest.raises(durably.RunParked):
        engine.run(wf, run_id="r")
    assert undone == []  # a park is never a reason to compensate: nothing began one
    assert COMPENSATE not in [r.kind for r in engine.history("r")]
    assert engine.get_run("r").status == "parked"


def test_a_sibling_failing_before_the_gather_looks_still_fails_it(
    engine: durably.Engine,
) -> None:
    """Every branch may have ended (one parked, one failed) before the gather sees the
    park: the failure is not lost behind it."""

    async def fails_later(ctx: durably.AsyncContext) -> None:
        import asyncio

        await asyncio.sleep(0)  # one turn of the loop: the sibling parks first
        raise ValueError("boom")  # ...and this ends before the gather wakes up

    @engine.workflow(name="wf")
    async def wf(ctx: durably.AsyncContext) -> list[Any]:
        return await ctx.gather(fails_later(ctx), ctx.sleep(MIN))

    with pytest.raises(durably.WorkflowFailed, match="boom"):
        engine.run(wf, run_id="r")
    assert engine.get_run("r").status == "failed"


class _Died(BaseException):
    """The process dies (a SIGKILL in a real run): nothing after it is written."""


@pytest.mark.parametrize("wait", ["sleep", "signal"])
def test_a_branch_wait_is_recorded_before_its_sibling_runs_on(
    journal_url: str, clock: durably.FakeClock, wait: str
) -> None:
    """A branch's wait parks only its branch while a sibling's long step goes on: its
    waiting record (wake time or deadline) is written at once, so a process that dies
    during the sibling's step resumes the wait at its recorded time, not a fresh one."""
    died = [False]

    async def long_call() -> str:
        await asyncio.sleep(0.05)  # in flight while the other branch parks
        clock.advance(20)  # a long model call (within the lease)
        if not died[0]:
            died[0] = True
            raise _Died()
        return "answer"

    with durably.Engine(journal_url, clock=clock, park_wait_s=0) as engine:

        @engine.workflow(name="wf")
        async def wf(ctx: durably.AsyncContext) -> list[Any]:
            waiting_branch = (
                ctx.sleep(MIN) if wait == "sleep" else ctx.wait_for_signal("go", timeout_s=MIN)
            )
            # The step goes first: it is in flight (its own writes done) when the wait
            # parks, so nothing else would write the wait's record before it ends.
            return await ctx.gather(ctx.step("llm", long_call), waiting_branch)

        start = clock.time()
        with pytest.raises(_Died):
            engine.run(wf, run_id="r")
        [rec] = [r for r in engine.history("r") if r.position == "0.1.0"]
        assert rec.status == "waiting"  # written before the process died
        with pytest.raises(durably.RunParked):
            engine.resume("r")  # the step runs again; the wait keeps its recorded time
        run = engine.get_run("r")
        assert run.wake_at == pytest.approx(start + MIN)  # not start + 20 + 60


class Crash(BaseException):
    """Stands in for a process death inside one process (real deaths: tests/crash)."""


def test_a_sibling_going_in_doubt_keeps_a_parked_branchs_timer_record(
    journal_url: str, clock: durably.FakeClock
) -> None:
    """A branch reaches its timer for the first time in the attempt in which its
    sibling's effect in doubt is reconciled; the reconcile fails, so the run waits in
    doubt for a person. The timer's ``waiting`` record (its wake time) is kept: after the
    person's retry the timer wakes at the time it was first given, not a fresh one."""
    crashes = {"left": 1}
    gate = threading.Event()  # the branch's first step waits for it in the first attempt

    def crash_after_the_effect(run_id: str, pos: str, name: str, window: str) -> None:
        if (pos, window) == ("0.0.0", "effect") and crashes["left"]:
            crashes["left"] -= 1
            raise Crash("died after the effect, before its record")

    def prep() -> str:
        assert gate.wait(10)
        return "p"

    lookups = {"fail": True}

    def lookup(key: str) -> Any:
        if lookups["fail"]:
            # The sibling has parked on its timer by the time the lookup gives up.
            deadline = time.monotonic() + 5
            while "0.1.1" not in waiting(engine, "r") and time.monotonic() < deadline:
                time.sleep(0.01)
            raise ConnectionError("the receiving system is down")
        return "sent"

    @durably.step(reconcile=lookup)
    def send() -> str:
        return "sent"

    with durably.Engine(
        journal_url, clock=clock, park_wait_s=0, fault_hook=crash_after_the_effect
    ) as engine:

        @engine.workflow(name="wf")
        async def wf(ctx: durably.AsyncContext) -> list[Any]:
            async def branch() -> None:
                await ctx.step("prep", prep)
                await ctx.sleep(MIN)

            return await ctx.gather(ctx.step("send", send), branch())

        with pytest.raises(Crash):
            engine.run(wf, run_id="r")
        gate.set()
        assert "0.1.1" not in waiting(engine, "r")  # the timer was not reached then
        clock.advance(10)
        reached = clock.time()
        with pytest.raises(durably.RunInDoubt, match="reconcile"):
            engine.run(wf, run_id="r")
        status, output = waiting(engine, "r")["0.1.1"]
        assert status == "waiting" and f'"wake_at":{reached + MIN}' in (output or "")
        clock.advance(MIN / 2)
        lookups["fail"] = False
        engine.retry("r")
        with pytest.raises(durably.RunParked):
            engine.resume("r")
        assert engine.get_run("r").wake_at == reached + MIN  # not MIN from the retry
        clock.advance(MIN / 2)
        assert engine.resume("r") == ["sent", None]
