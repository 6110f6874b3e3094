"""Waits in ``ctx.gather`` branches: an approval request made in
a branch whose siblings go on writing must not reach the journal without its
``approvals`` row (the park writes both, in one transaction).

FakeClock, both stores; nothing here sleeps.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import durably
from durably.approvals import approval_digest

MIN = 60.0


@pytest.fixture
def clock() -> durably.FakeClock:
    return durably.FakeClock()


@pytest.fixture
def engine(journal_url: str, clock: durably.FakeClock) -> Iterator[durably.Engine]:
    e = durably.Engine(journal_url, clock=clock, park_wait_s=0)
    yield e
    e.close()


def test_a_request_beside_a_failure_the_workflow_catches_does_not_block_the_replay(
    engine: durably.Engine, clock: durably.FakeClock
) -> None:
    """The request's branch parks, its sibling's step fails and the workflow catches the
    gather's failure and parks on a timer: the request's ``waiting`` record used to ride
    with the failure's write while its row (written only by a park of the request) never
    came, so the wake's replay found a request with no row and blocked the run."""

    def boom() -> None:
        raise ValueError("boom")

    @engine.workflow(name="wf")
    async def wf(ctx: durably.AsyncContext) -> Any:
        try:
            await ctx.gather(ctx.request_approval("refund", {"n": 1}), ctx.step("boom", boom))
        except durably.StepFailed:
            pass
        await ctx.sleep(MIN)
        return "done"

    with pytest.raises(durably.RunParked):
        engine.run(wf, run_id="r")
    # Never asked for (the gather failed instead of parking): no row, and no record.
    assert engine.pending_approvals("r") == []
    assert [r.kind for r in engine.history("r") if r.kind == "approval"] == []
    clock.advance(MIN)
    assert engine.resume("r") == "done"
    assert engine.get_run("r").status == "completed"


def test_a_request_beside_a_sibling_that_writes_is_asked_with_the_park(
    engine: durably.Engine,
) -> None:
    """The sibling's steps write while the request's branch is parked: the request's
    record and row are written together by the park, and deciding it finishes the run."""

    async def side(ctx: durably.AsyncContext) -> str:
        await ctx.step("one", lambda: "one")
        return str(await ctx.step("two", lambda: "two"))

    @engine.workflow(name="wf")
    async def wf(ctx: durably.AsyncContext) -> list[Any]:
        got, two = await ctx.gather(ctx.request_approval("ship", {"n": 2}), side(ctx))
        return [got.outcome, two]

    with pytest.raises(durably.RunParked):
        engine.run(wf, run_id="r")
    [req] = engine.pending_approvals("r")
    assert req.request_id == "0.0.0"
    [rec] = [r for r in engine.history("r") if r.kind == "approval"]
    assert rec.status == "waiting" and rec.started_at == req.requested_at.timestamp()
    engine.approve("r", "0.0.0", digest=approval_digest("ship", {"n": 2}))
    assert engine.resume("r") == ["approved", "two"]


def boom() -> None:
    raise ValueError("boom")


def test_a_signal_sent_for_a_later_wait_is_not_taken_by_a_branch_of_a_failed_gather(
    engine: durably.Engine,
) -> None:
    """The gather failed (the workflow caught it) while a branch was parked on ``x``; the
    run then parked on a top-level wait for ``x``. The replay used to let the branch's
    wait take the signal before its sibling's recorded failure ended the gather again:
    the signal was lost and the run stayed parked for ever."""

    @engine.workflow(name="wf")
    async def wf(ctx: durably.AsyncContext) -> Any:
        try:
            await ctx.gather(ctx.wait_for_signal("x"), ctx.step("boom", boom))
        except durably.StepFailed:
            pass
        return await ctx.wait_for_signal("x")

    with pytest.raises(durably.RunParked):
        engine.run(wf, run_id="r")
    engine.signal("r", "x", "for the top")
    assert engine.resume("r") == "for the top"


def test_a_nested_branch_of_a_failed_gather_does_not_take_the_signal_either(
    engine: durably.Engine,
) -> None:
    async def inner(ctx: durably.AsyncContext) -> list[Any]:
        return await ctx.gather(ctx.wait_for_signal("x"), ctx.step("ok", lambda: 1))

    async def failing(ctx: durably.AsyncContext) -> None:
        await ctx.step("before", lambda: 1)
        await ctx.step("boom", boom)

    @engine.workflow(name="wf")
    async def wf(ctx: durably.AsyncContext) -> Any:
        try:
            await ctx.gather(inner(ctx), failing(ctx))
        except durably.StepFailed:
            pass
        return await ctx.wait_for_signal("x")

    with pytest.raises(durably.RunParked):
        engine.run(wf, run_id="r")
    engine.signal("r", "x", "for the top")
    assert engine.resume("r") == "for the top"


def test_a_branch_of_a_failed_gather_does_not_go_past_its_due_timer_on_replay(
    engine: durably.Engine, clock: durably.FakeClock
) -> None:
    """Live, the branch parked on its timer and the gather failed: step ``x`` never ran.
    The replay after the timer is due must end the gather the same way, not run ``x``."""
    ran: list[str] = []

    async def x() -> str:  # async: it would run on the loop at once, not in a thread
        ran.append("x")
        return "x"

    async def timed(ctx: durably.AsyncContext) -> Any:
        await ctx.sleep(MIN)
        return await ctx.step("x", x)

    @engine.workflow(name="wf")
    async def wf(ctx: durably.AsyncContext) -> Any:
        try:
            await ctx.gather(timed(ctx), ctx.step("boom", boom))
        except durably.StepFailed:
            pass
        await ctx.sleep(10 * MIN)
        return "done"

    with pytest.raises(durably.RunParked):
        engine.run(wf, run_id="r")
    clock.advance(10 * MIN)
    assert engine.resume("r") == "done"
    assert ran == []
    # The timer is not over in this run's history either: the gather failed before it.
    assert {r.position: r.status for r in engine.history("r")}["0.0.0"] == "waiting"


def test_waits_for_one_name_in_three_branches_take_its_signals_in_branch_order(
    engine: durably.Engine,
) -> None:
    """On each wake the branches whose waits parked before look at the store in branch
    order (first come, first served), never in the order their replays settle."""

    @engine.workflow(name="wf")
    async def wf(ctx: durably.AsyncContext) -> list[Any]:
        return await ctx.gather(
            ctx.wait_for_signal("x"),
            ctx.wait_for_signal("x"),
            ctx.wait_for_signal("x", timeout_s=MIN),
        )

    with pytest.raises(durably.RunParked):
        engine.run(wf, run_id="r")
    engine.signal("r", "x", 1)
    with pytest.raises(durably.RunParked):
        engine.resume("r")
    assert (engine.get_run("r").park_reason or "").startswith("2 waits: signal 'x'")
    engine.signal("r", "x", 2)
    engine.signal("r", "x", 3)
    assert engine.resume("r") == [1, 2, 3]
