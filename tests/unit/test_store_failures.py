"""Failure domains: a store error is never the workflow's, and stop signals are latched.

Every test here drives a real SQLite journal through ``FlakyStore`` (scripted failures of
the real error types, raised before or after the real write) on a fake clock, so retry
backoff moves the clock and never sleeps. Cross-process versions (a real second claim, a
real SIGSTOP, real SIGKILLs with a flaky store) live in tests/fleet and tests/crash.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import durably
from durably.clock import SystemClock
from durably.history import FAILED_RUN
from tests.store_faults import FlakyStore


class Crash(BaseException):
    """Stands in for a process death inside one process."""


@pytest.fixture
def clock() -> durably.FakeClock:
    return durably.FakeClock()


@pytest.fixture
def engine(tmp_path: Path, clock: durably.FakeClock) -> Iterator[durably.Engine]:
    e = durably.Engine(f"sqlite:///{tmp_path / 'j.db'}", clock=clock)
    e.store = FlakyStore(e.store)  # type: ignore[assignment]
    yield e
    e.close()


def flaky(engine: durably.Engine) -> FlakyStore:
    assert isinstance(engine.store, FlakyStore)
    return engine.store


class Tools:
    """Counts calls of step functions (the outside world) and the keys they got."""

    def __init__(self) -> None:
        self.count: Counter[str] = Counter()
        self.keys: dict[str, set[str]] = {}

    def keyed(self, name: str) -> Callable[..., str]:
        def fn(*args: Any, idempotency_key: str) -> str:
            self.count[name] += 1
            self.keys.setdefault(name, set()).add(idempotency_key)
            return name

        fn.__name__ = name
        return fn


def taker(journal: Path) -> Callable[..., str]:
    """A step function during which another owner claims the run: its token goes up."""

    def take_over(*, idempotency_key: str) -> str:
        with sqlite3.connect(journal) as db:
            db.execute("UPDATE runs SET fencing_token = fencing_token + 1")
        return "taken"

    return take_over


def make_three_steps(engine: durably.Engine, tools: Tools, caught: list[str]) -> Any:
    @engine.workflow(name="three")
    def three(ctx: durably.Context) -> list[str]:
        out = []
        for name in ("a", "b", "c"):
            try:
                out.append(ctx.step(name, tools.keyed(name)))
            except Exception as exc:  # a workflow that swallows errors
                caught.append(f"{name}: {type(exc).__name__}")
        return out

    return three


def test_transient_append_errors_are_retried_on_the_engine_clock(
    engine: durably.Engine, clock: durably.FakeClock
) -> None:
    tools, caught = Tools(), []
    wf = make_three_steps(engine, tools, caught)
    flaky(engine).fail("append", 2, "busy")
    flaky(engine).fail("append", 1, "dropped", after=True)  # written, reported failed
    flaky(engine).fail("append", 1, "full")
    t0 = clock.time()
    assert engine.run(wf, run_id="r") == ["a", "b", "c"]
    assert caught == []
    assert tools.count == Counter({"a": 1, "b": 1, "c": 1})
    assert clock.time() > t0  # the backoff waited on the injected clock
    assert sum(flaky(engine).injected.values()) == 4


def test_a_store_that_stays_down_stops_the_run_resumable(engine: durably.Engine) -> None:
    tools, caught = Tools(), []
    wf = make_three_steps(engine, tools, caught)
    flaky(engine).fail("append", 1000, "dropped")
    with pytest.raises(durably.StoreError, match="closed the connection"):
        engine.run(wf, run_id="r")
    assert caught == []  # the workflow's `except Exception` never saw the store error
    assert tools.count == Counter({"a": 1})  # nothing ran after the failed write
    run = engine.get_run("r")
    assert run.status == "running" and run.owner is None  # resumable, lease given back
    flaky(engine).heal()
    assert engine.run(wf, run_id="r") == ["a", "b", "c"]
    assert len(tools.keys["a"]) == 1  # the unrecorded step ran again with the same key
    assert caught == []


def test_a_permanent_store_error_is_not_retried(
    engine: durably.Engine, clock: durably.FakeClock
) -> None:
    tools, caught = Tools(), []
    wf = make_three_steps(engine, tools, caught)
    flaky(engine).fail("append", 1, "corrupt")
    t0 = clock.time()
    with pytest.raises(durably.StoreError, match="permanent"):
        engine.run(wf, run_id="r")
    assert clock.time() == t0 and caught == []
    assert engine.get_run("r").status == "running"


@pytest.mark.parametrize("times", [1, 1000])
def test_a_store_error_at_finish_never_fails_a_run_that_returned(
    engine: durably.Engine, times: int
) -> None:
    tools, caught = Tools(), []
    wf = make_three_steps(engine, tools, caught)
    flaky(engine).fail("finish", times, "busy")
    if times == 1:  # retried: the run completes at once
        assert engine.run(wf, run_id="r") == ["a", "b", "c"]
    else:
        with pytest.raises(durably.StoreError, match="locked"):
            engine.run(wf, run_id="r")
        run = engine.get_run("r")
        assert run.status == "running" and run.owner is None
        flaky(engine).heal()
        assert engine.run(wf, run_id="r") == ["a", "b", "c"]
    assert engine.get_run("r").status == "completed"
    assert tools.count == Counter({"a": 1, "b": 1, "c": 1})  # the resume replayed
    assert caught == []


@pytest.mark.parametrize("kind", ["dropped", "busy"])
def test_a_claim_that_committed_but_lost_its_reply_is_retried_not_refused(
    engine: durably.Engine, kind: str
) -> None:
    # The claim commits, then the caller hears a transient error (the connection dropped
    # during COMMIT): the engine's retry finds the run leased to this very process, which
    # is not driving it. It must take it over, not raise RunLeased ("being driven by"
    # itself) and leave the run held, undriven, for lease_s.
    tools, caught = Tools(), []
    wf = make_three_steps(engine, tools, caught)
    flaky(engine).fail("claim", 1, kind, after=True)
    assert engine.run(wf, run_id="r") == ["a", "b", "c"]
    run = engine.get_run("r")
    assert run.status == "completed" and run.fencing_token == 2  # the retry took it over
    assert tools.count == Counter({"a": 1, "b": 1, "c": 1})


def test_when_recording_a_failure_fails_the_lease_is_still_released(
    engine: durably.Engine,
) -> None:
    @engine.workflow(name="boom")
    def boom(ctx: durably.Context) -> None:
        raise ValueError("the workflow's own bug")

    flaky(engine).fail("finish", 1000, "full")
    with pytest.raises(durably.StoreError, match="disk is full"):
        engine.run(boom, run_id="r")
    run = engine.get_run("r")
    assert run.status == "running" and run.owner is None
    flaky(engine).heal()
    # A retry from this same process is not refused (RunLeased) for lease_s.
    with pytest.raises(durably.WorkflowFailed, match="own bug"):
        engine.run(boom, run_id="r")
    assert engine.get_run("r").status == FAILED_RUN


def test_a_refused_append_is_latched_a_bare_except_runs_nothing_more(
    engine: durably.Engine, tmp_path: Path
) -> None:
    tools, take_over = Tools(), taker(tmp_path / "j.db")

    @engine.workflow(name="stubborn")
    def stubborn(ctx: durably.Context) -> str:
        for name in ("take_over", "e1", "e2", "e3"):
            try:
                ctx.step(name, take_over if name == "take_over" else tools.keyed(name))
            except:  # noqa: E722  (the point of the test)
                pass
        try:
            ctx.now()
        except:  # noqa: E722
            pass
        return "went on"

    with pytest.raises(durably.StaleLease):
        engine.run(stubborn, run_id="r")
    assert tools.count == Counter()  # take_over's own write was the one refused


def test_a_step_in_doubt_is_latched_a_bare_except_runs_nothing_more(
    engine: durably.Engine,
) -> None:
    tools = Tools()
    crash = [True]

    @durably.step(effect=True)
    def wire(amount: int) -> str:  # no key, no reconcile: a crash leaves it in doubt
        if crash[0]:
            raise Crash("killed mid-transfer")
        return "sent"

    @engine.workflow(name="pay")
    def pay(ctx: durably.Context) -> str:
        if crash[0]:
            ctx.step("wire", wire, 100)  # the process "dies" here, the intent recorded
        try:
            ctx.step("wire", wire, 100)
        except:  # noqa: E722
            pass
        return ctx.step("after", tools.keyed("after"))

    with pytest.raises(Crash):
        engine.run(pay, run_id="r")
    crash[0] = False
    with pytest.raises(durably.RunInDoubt):
        engine.run(pay, run_id="r")
    assert tools.count == Counter()
    assert engine.get_run("r").status == "in_doubt"


def test_past_its_lease_deadline_a_driver_starts_no_step(
    engine: durably.Engine, clock: durably.FakeClock
) -> None:
    tools, stalls = Tools(), [1]

    @engine.workflow(name="stall")
    def stall(ctx: durably.Context) -> list[str]:
        first = ctx.step("a", tools.keyed("a"))
        if stalls.pop() if stalls else 0:
            clock.advance(engine.lease_s + 1)  # a stop (SIGSTOP, a pause) past the lease
        return [first, ctx.step("b", tools.keyed("b"))]

    with pytest.raises(durably.StaleLease, match="past its lease deadline"):
        engine.run(stall, run_id="r")
    assert tools.count == Counter({"a": 1})
    run = engine.get_run("r")
    assert run.status == "running" and run.owner is None  # given back, resumable at once
    assert engine.run(stall, run_id="r") == ["a", "b"]
    assert tools.count == Counter({"a": 1, "b": 1})


def test_async_workflows_retry_and_latch_the_same_way(
    engine: durably.Engine, clock: durably.FakeClock
) -> None:
    tools, caught = Tools(), []

    @engine.workflow(name="par")
    async def par(ctx: durably.AsyncContext) -> list[Any]:
        try:
            return await ctx.gather(
                ctx.step("x", tools.keyed("x")), ctx.step("y", tools.keyed("y"))
            )
        except Exception as exc:
            caught.append(type(exc).__name__)
            return []

    flaky(engine).fail("append", 2, "busy")
    assert engine.run(par, run_id="ok") == ["x", "y"]
    flaky(engine).fail("append", 1000, "dropped")
    with pytest.raises(durably.StoreError, match="closed the connection"):
        engine.run(par, run_id="down")
    assert caught == [] and engine.get_run("down").status == "running"


def test_a_retry_backoff_longer_than_the_lease_keeps_the_lease_on_a_fake_clock(
    engine: durably.Engine, clock: durably.FakeClock
) -> None:
    attempts: list[float] = []

    @durably.step(retries=3, backoff=engine.lease_s)
    def flaky_tool(*, idempotency_key: str) -> str:
        attempts.append(clock.time())
        if len(attempts) < 4:
            raise ConnectionError("the tool's own outage")
        return "ok"

    @engine.workflow(name="patient")
    def patient(ctx: durably.Context) -> str:
        return ctx.step("tool", flaky_tool)

    assert engine.run(patient, run_id="r") == "ok"
    assert attempts[-1] - attempts[0] > engine.lease_s  # waited past the lease, kept it


def test_gather_with_return_exceptions_cannot_continue_after_a_takeover(
    engine: durably.Engine, tmp_path: Path
) -> None:
    tools, take_over = Tools(), taker(tmp_path / "j.db")

    @engine.workflow(name="par_stubborn")
    async def par_stubborn(ctx: durably.AsyncContext) -> str:
        results = await ctx.gather(ctx.step("take_over", take_over), return_exceptions=True)
        assert results  # the refusal came back as a value...
        try:
            await ctx.step("after", tools.keyed("after"))  # ...but nothing live goes on
        except:  # noqa: E722
            pass
        return "went on"

    with pytest.raises(durably.StaleLease):
        engine.run(par_stubborn, run_id="r")
    assert tools.count == Counter()


def test_sqlite_errors_are_classified(tmp_path: Path) -> None:
    from durably.store.sqlite import SQLiteStore

    path = tmp_path / "j.db"
    store = SQLiteStore(f"sqlite:///{path}", durably.FakeClock(), busy_timeout_s=0.05)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(durably.StoreBusy) as busy:
            store.release("nobody", 1)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    store.close()
    assert busy.value.transient
    path.write_bytes(b"this is not a database" * 500)
    with pytest.raises(durably.NotADurablyDatabase) as corrupt:
        SQLiteStore(f"sqlite:///{path}", durably.FakeClock())
    assert not corrupt.value.transient


def test_run_async_waits_out_a_failing_store_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The retry backoff of a claim and of a finish must not block the event loop (other
    # runs and tasks on it stall for up to store_retry_s), as a step's write does not.
    on_loop: list[float] = []
    real_sleep = SystemClock.sleep

    def sleep(self: SystemClock, seconds: float) -> None:
        try:
            asyncio.get_running_loop()
            on_loop.append(seconds)
        except RuntimeError:
            pass  # a worker thread: the loop goes on
        real_sleep(self, seconds)

    monkeypatch.setattr(SystemClock, "sleep", sleep)
    engine = durably.Engine(f"sqlite:///{tmp_path / 'j.db'}", store_retry_s=5)
    engine.store = store = FlakyStore(engine.store)  # type: ignore[assignment]
    tools = Tools()

    @engine.workflow(name="one")
    async def one(ctx: durably.AsyncContext) -> str:
        return await ctx.step("a", tools.keyed("a"))

    try:
        store.fail("claim", 2, "busy")
        store.fail("append", 2, "dropped")
        store.fail("finish", 2, "full")
        assert asyncio.run(engine.run_async(one, run_id="r")) == "a"
        assert store.injected == Counter({"claim:busy": 2, "append:dropped": 2, "finish:full": 2})
    finally:
        engine.close()
    assert on_loop == []
    assert tools.count == Counter({"a": 1})
