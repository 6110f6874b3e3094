"""Edges of waits in ``ctx.gather`` branches found by review: an approval request made in
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
