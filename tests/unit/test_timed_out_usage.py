"""Spend reported by a step attempt after its ``timeout_s`` ran out is real spend.

Python cannot stop a thread: an attempt that timed out goes on in the background, and
the model call it made is billed when it returns. Its ``durably.usage(...)`` reaches the
ledger when it arrives (its own entry), and a budget it crosses stops the run at its next
position that goes live. On both stores, in a sync workflow and for sync steps of an
async workflow (which run in step threads).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import durably

TIMEOUT_S = 0.25  # each slow attempt costs this much real time (a fast one fits under load)


class Slow:
    """A step function whose first two attempts outlive the timeout and report their
    usage only after it (when the third, fast attempt has run); each reports 1,000."""

    def __init__(self) -> None:
        self.attempts = 0
        self.release = threading.Event()
        self.late = 0
        self.late_done = threading.Event()
        self.lock = threading.Lock()

    def __call__(self, prompt: str) -> str:
        with self.lock:
            self.attempts += 1
            attempt = self.attempts
        if attempt <= 2:
            self.release.wait(10)  # past the timeout: the attempt has been given up
            durably.usage(tokens=1000, cost_usd=0.01)
            with self.lock:
                self.late += 1
                if self.late == 2:
                    self.late_done.set()
            return "late"
        durably.usage(tokens=1000, cost_usd=0.01)
        self.release.set()
        return f"answer:{prompt}"


@pytest.fixture
def engine(journal_url: str) -> Iterator[durably.Engine]:
    e = durably.Engine(journal_url, clock=durably.FakeClock())
    yield e
    e.close()


def _register(engine: durably.Engine, slow: Slow, kind: str, budget: int | None) -> Any:
    step = durably.step(retries=2, timeout_s=TIMEOUT_S, backoff=0.0)(slow)

    def wait_for_late() -> int:
        assert slow.late_done.wait(10), "the timed-out attempts never reported"
        return slow.late

    def after() -> str:
        return "after"

    if kind == "sync":

        @engine.workflow(name=f"late-usage-{kind}")
        def wf(ctx: durably.Context) -> str:
            if budget is not None:
                ctx.budget(tokens=budget)
            answer: str = ctx.step("ask", step, "q")
            ctx.step("wait", wait_for_late)
            ctx.step("after", after)
            return answer

        return wf

    @engine.workflow(name=f"late-usage-{kind}")
    async def awf(ctx: durably.AsyncContext) -> str:
        if budget is not None:
            await ctx.budget(tokens=budget)
        answer: str = await ctx.step("ask", step, "q")
        await ctx.step("wait", wait_for_late)
        await ctx.step("after", after)
        return answer

    return awf


def _run(engine: durably.Engine, wf: Any, kind: str, run_id: str) -> Any:
    if kind == "sync":
        return engine.run(wf, run_id=run_id)
    return asyncio.run(engine.run_async(wf, run_id=run_id))


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_usage_reported_after_an_attempts_timeout_reaches_the_ledger(
    engine: durably.Engine, kind: str
) -> None:
    slow = Slow()
    wf = _register(engine, slow, kind, budget=None)
    assert _run(engine, wf, kind, f"late-{kind}") == "answer:q"
    assert slow.attempts == 3
    spend = engine.spend(f"late-{kind}")
    # Every attempt's call was billed: two after their timeout, one in time.
    assert spend.tokens == 3000
    assert spend.entries == 3
    assert round(spend.cost_usd, 6) == 0.03


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_usage_reported_after_a_timeout_crosses_the_budget(
    engine: durably.Engine, kind: str
) -> None:
    slow = Slow()
    wf = _register(engine, slow, kind, budget=2000)
    with pytest.raises(durably.WorkflowFailed, match="BudgetExceeded"):
        _run(engine, wf, kind, f"over-{kind}")
    run = engine.get_run(f"over-{kind}")
    assert run is not None and run.status == "failed"
    assert run.error_type == "durably.errors.BudgetExceeded"
    assert engine.spend(f"over-{kind}").tokens == 3000


def test_usage_of_a_gather_branch_cancelled_mid_step_reaches_the_ledger(
    engine: durably.Engine,
) -> None:
    """A branch whose sibling failed is cancelled while its sync step runs in a step
    thread: what the step reported before the cancel and after it is billed all the same."""
    started, release, done = threading.Event(), threading.Event(), threading.Event()

    def model() -> str:
        durably.usage(tokens=1000)
        started.set()
        release.wait(10)
        durably.usage(tokens=500)  # the call's second half, after the cancel
        done.set()
        return "late"

    def boom() -> str:
        assert started.wait(10)
        raise ValueError("no")

    @engine.workflow(name="gather-cancel")
    async def wf(ctx: durably.AsyncContext) -> list[str]:
        out: list[str] = await ctx.gather(ctx.step("model", model), ctx.step("boom", boom))
        return out

    with pytest.raises(durably.WorkflowFailed, match="no"):
        asyncio.run(engine.run_async(wf, run_id="g"))
    release.set()
    assert done.wait(10)
    assert engine.spend("g").tokens == 1500


def test_usage_a_streamed_attempt_reports_after_its_timeout_reaches_the_ledger(
    engine: durably.Engine,
) -> None:
    """A streamed step's chunk that comes after ``timeout_s`` (the attempt retried):
    the usage its stream reports then is billed too."""
    release, late_done = threading.Event(), threading.Event()
    attempts: list[int] = []

    @durably.step(retries=1, timeout_s=TIMEOUT_S, backoff=0.0)
    def answer() -> Iterator[str]:
        attempts.append(1)
        if len(attempts) == 1:
            release.wait(10)  # the first chunk comes past the timeout
            durably.usage(tokens=700)
            late_done.set()
            yield "late"
            return
        durably.usage(tokens=300)
        release.set()
        yield "ok"

    @engine.workflow(name="late-stream")
    def wf(ctx: durably.Context) -> list[str]:
        return list(ctx.step_stream("answer", answer))

    assert engine.run(wf, run_id="s") == ["ok"]
    assert late_done.wait(10)  # set after usage() returned: its entry is committed
    assert engine.spend("s").tokens == 1000
