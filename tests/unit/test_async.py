"""Async workflows and ctx.gather: positions that do not depend on completion order."""

from __future__ import annotations

import asyncio
import random
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import durably


class Crash(BaseException):
    """Stands in for a process death inside one process."""


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[durably.Engine]:
    e = durably.Engine(f"sqlite:///{tmp_path / 'j.db'}")
    yield e
    e.close()


def test_async_workflow_replays(engine: durably.Engine) -> None:
    calls: Counter[str] = Counter()
    seen: list[list[object]] = []

    async def model(prompt: str) -> str:
        calls[prompt] += 1
        await asyncio.sleep(0)
        return prompt.upper()

    @engine.workflow(name="awf")
    async def awf(ctx: durably.AsyncContext, p: str) -> list[object]:
        out: list[object] = []
        seen.append(out)
        out.append(await ctx.step("a", model, p))
        out.append(await ctx.random())
        out.append(await ctx.step("b", model, f"{out[0]}!"))
        out.append(await ctx.step("c", model, f"{out[2]}?"))
        return out

    def hook(run_id: str, pos: str, name: str, window: str) -> None:
        if (pos, window) == ("3", "before"):
            raise Crash("interrupted before c")

    # Interrupted mid-run (the run stays unfinished), then resumed: a real replay.
    engine.fault_hook = hook
    with pytest.raises(Crash):
        engine.run(awf, "hi", run_id="r")
    assert engine.get_run("r").status == "running"
    engine.fault_hook = None
    result = engine.run(awf, "hi", run_id="r")
    assert result[:3] == seen[0] == seen[1][:3]  # the recorded random value too
    assert result[0] == "HI" and result[2:] == ["HI!", "HI!?"]
    assert calls == Counter({"hi": 1, "HI!": 1, "HI!?": 1})


def test_run_async_inside_a_running_loop(engine: durably.Engine) -> None:
    @engine.workflow(name="awf")
    async def awf(ctx: durably.AsyncContext) -> int:
        return await ctx.step("one", lambda: 1)

    async def main() -> int:
        result: int = await engine.run_async(awf, run_id="r")
        return result

    assert asyncio.run(main()) == 1


@pytest.mark.parametrize("seed", range(5))
def test_gather_replays_identically_whatever_the_completion_order(
    engine: durably.Engine, seed: int
) -> None:
    rng = random.Random(seed)
    delays = {f"t{i}": rng.random() * 0.02 for i in range(4)}
    executed: Counter[str] = Counter()
    crash = {"on": True}

    async def tool(name: str, *, idempotency_key: str) -> str:
        await asyncio.sleep(delays[name])
        executed[name] += 1
        return f"{name}@{idempotency_key}"

    async def branch(ctx: durably.AsyncContext, name: str) -> list[str]:
        first = await ctx.step(name, tool, name)
        second = await ctx.step(name + "-again", tool, name)
        return [first, second]

    async def after() -> None:
        if crash["on"]:
            raise Crash("after the gather")

    @engine.workflow(name="par")
    async def par(ctx: durably.AsyncContext) -> list[list[str]]:
        out = await ctx.gather(*(branch(ctx, n) for n in delays))
        await ctx.step("after", after)
        return out

    with pytest.raises(Crash):
        engine.run(par, run_id="r")
    recorded = {s.position: s.output for s in engine.history("r")}
    # New delays: a different completion order on the resume.
    for k in delays:
        delays[k] = rng.random() * 0.02
    crash["on"] = False
    result = engine.run(par, run_id="r")
    key = engine.get_run("r").key
    assert result == [[f"t{i}@{key(f'0.{i}.0')}", f"t{i}@{key(f'0.{i}.1')}"] for i in range(4)]
    assert executed == Counter({n: 2 for n in delays})  # nothing ran twice
    assert {s.position: s.output for s in engine.history("r") if s.position in recorded} == recorded


def test_changed_call_order_in_code_is_nondeterminism(engine: durably.Engine) -> None:
    order = ["a", "b"]
    crash = {"on": True}

    async def tool(x: str) -> str:
        return x

    async def stop() -> None:
        if crash["on"]:
            raise Crash("x")

    @engine.workflow(name="w")
    async def w(ctx: durably.AsyncContext) -> list[str]:
        out = await ctx.gather(*(ctx.step(n, tool, n) for n in order))
        await ctx.step("stop", stop)
        return out

    with pytest.raises(Crash):
        engine.run(w, run_id="r")
    order.reverse()
    crash["on"] = False
    # The gather's record catches it, before any branch asks for a position.
    with pytest.raises(
        durably.NonDeterminism,
        match=r"step 0: history has a gather of 2 branches \['a', 'b'\], code asked for a"
        r" gather of 2 branches \['b', 'a'\]",
    ):
        engine.run(w, run_id="r")


def test_gather_refuses_started_tasks(engine: durably.Engine) -> None:
    @engine.workflow(name="w")
    async def w(ctx: durably.AsyncContext) -> None:
        task = asyncio.ensure_future(asyncio.sleep(0))
        try:
            await ctx.gather(task)  # type: ignore[arg-type]
        finally:
            await task

    with pytest.raises(durably.WorkflowFailed, match="coroutines that have not started"):
        engine.run(w, run_id="r")


# An async step function in a sync workflow blocks the run: tests/unit/test_misuse_refused.py


# -- sync step functions in async workflows: a bounded thread pool -----------------------


def test_sync_steps_in_a_gather_run_in_threads_not_on_the_loop(engine: durably.Engine) -> None:
    # Four sync steps meet at a barrier: on the event loop (one at a time) the first would
    # wait for the others until the barrier breaks.
    barrier = threading.Barrier(4, timeout=30)
    threads: set[str] = set()

    def meet(i: int) -> int:
        threads.add(threading.current_thread().name)
        barrier.wait()
        return i

    @engine.workflow(name="w")
    async def w(ctx: durably.AsyncContext) -> list[int]:
        out: list[int] = await ctx.gather(*(ctx.step(f"meet{i}", meet, i) for i in range(4)))
        return out

    assert engine.run(w, run_id="r") == [0, 1, 2, 3]
    assert len(threads) == 4 and threading.main_thread().name not in threads


def test_a_sync_step_does_not_block_the_event_loop(engine: durably.Engine) -> None:
    released = threading.Event()

    def wait_for_release() -> bool:
        return released.wait(30)

    async def release() -> str:
        await asyncio.sleep(0)
        released.set()
        return "released"

    @engine.workflow(name="w")
    async def w(ctx: durably.AsyncContext) -> list[Any]:
        out: list[Any] = await ctx.gather(
            ctx.step("wait", wait_for_release), ctx.step("release", release)
        )
        return out

    assert engine.run(w, run_id="r") == [True, "released"]


def test_a_sync_step_in_an_async_workflow_honours_timeout_s(engine: durably.Engine) -> None:
    stop = threading.Event()
    attempts: list[int] = []

    @durably.step(timeout_s=0.2, retries=1)
    def stuck() -> str:
        attempts.append(1)
        stop.wait(30)
        return "late"

    @engine.workflow(name="w")
    async def w(ctx: durably.AsyncContext) -> str:
        return await ctx.step("stuck", stuck)

    try:
        with pytest.raises(durably.WorkflowFailed) as info:
            engine.run(w, run_id="r")
    finally:
        stop.set()
    assert info.value.type_name == "durably.errors.StepTimeout"
    (rec,) = engine.history("r")
    assert (rec.status, rec.error_type, rec.attempts) == ("failed", "durably.errors.StepTimeout", 2)


def test_usage_reported_by_a_sync_step_in_a_thread_is_recorded(engine: durably.Engine) -> None:
    def model(prompt: str) -> str:
        durably.usage(tokens=120, cost_usd=0.5)
        return threading.current_thread().name

    @engine.workflow(name="w")
    async def w(ctx: durably.AsyncContext) -> str:
        return await ctx.step("model", model, "hi")

    assert engine.run(w, run_id="r") != threading.main_thread().name
    (rec,) = engine.history("r")
    assert (rec.usage_tokens, rec.usage_cost_usd) == (120, 0.5)


def test_sync_step_threads_are_bounded(engine: durably.Engine) -> None:
    limit = getattr(durably.context, "SYNC_STEP_THREADS_MAX", 32)  # getattr: absent before
    lock = threading.Lock()
    running = {"now": 0, "max": 0}
    go = threading.Event()
    deadline = time.monotonic() + 30  # one patience for all: a serial run fails in 30 s

    def work(i: int) -> int:
        with lock:
            running["now"] += 1
            running["max"] = max(running["max"], running["now"])
            if running["now"] == limit:
                go.set()  # the pool is full: let everyone finish
        go.wait(max(0.0, deadline - time.monotonic()))
        with lock:
            running["now"] -= 1
        return i

    @engine.workflow(name="w")
    async def w(ctx: durably.AsyncContext) -> int:
        out = await ctx.gather(*(ctx.step(f"w{i}", work, i) for i in range(limit + 8)))
        return len(out)

    assert engine.run(w, run_id="r") == limit + 8
    assert running["max"] == limit


# -- concurrent use of a context outside ctx.gather ---------------------------------------


@pytest.mark.parametrize("how", ["asyncio.gather", "create_task"])
def test_concurrent_steps_outside_ctx_gather_block_the_run_live(
    engine: durably.Engine, how: str
) -> None:
    ran: list[str] = []

    async def tool(name: str) -> str:
        ran.append(name)
        await asyncio.sleep(0.01)
        return name

    @engine.workflow(name="w")
    async def w(ctx: durably.AsyncContext) -> list[str]:
        if how == "asyncio.gather":
            return list(await asyncio.gather(ctx.step("a", tool, "a"), ctx.step("b", tool, "b")))
        task = asyncio.create_task(ctx.step("a", tool, "a"))
        await asyncio.sleep(0)
        b = await ctx.step("b", tool, "b")
        return [await task, b]

    with pytest.raises(durably.ConfigError, match=r"use ctx\.gather") as info:
        engine.run(w, run_id="r")
    assert "await ctx.gather(" in str(info.value)
    assert engine.get_run("r").status == "blocked"
    assert ran == ["a"]  # the second step never started


def test_sequential_awaits_through_tasks_are_not_concurrent_use(engine: durably.Engine) -> None:
    async def tool(name: str) -> str:
        await asyncio.sleep(0)
        return name

    @engine.workflow(name="w")
    async def w(ctx: durably.AsyncContext) -> list[str]:
        a = await asyncio.wait_for(ctx.step("a", tool, "a"), 30)
        b = await asyncio.create_task(ctx.step("b", tool, "b"))
        c = await ctx.step("c", tool, "c")
        return [a, b, c]

    assert engine.run(w, run_id="r") == ["a", "b", "c"]
    assert [s.position for s in engine.history("r")] == ["0", "1", "2"]


# -- values that were never awaited -------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "use"),
    [
        ("now", lambda v: v.isoformat()),
        ("now", lambda v: f"{v:%H:%M}"),
        ("now", lambda v: v.hour < 6),
        ("random", lambda v: v < 0.5),
        ("random", lambda v: v * 10),
        ("uuid", lambda v: str(v)),
        ("step", lambda v: v["text"]),
    ],
)
def test_a_value_used_without_await_blocks_the_run_with_a_clear_message(
    engine: durably.Engine, call: str, use: Callable[[Any], Any]
) -> None:
    def model() -> dict[str, str]:
        return {"text": "hi"}

    @engine.workflow(name="w")
    async def w(ctx: durably.AsyncContext) -> Any:
        value = ctx.step("model", model) if call == "step" else getattr(ctx, call)()
        return use(value)

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a "never awaited" RuntimeWarning is not the message
        with pytest.raises(durably.ConfigError, match=rf"await ctx\.{call}\("):
            engine.run(w, run_id="r")
    assert engine.get_run("r").status == "blocked"


def test_a_dropped_awaitable_blocks_the_run_at_the_next_call(engine: durably.Engine) -> None:
    ran: list[str] = []

    def tool(name: str) -> str:
        ran.append(name)
        return name

    @engine.workflow(name="w")
    async def w(ctx: durably.AsyncContext) -> str:
        ctx.now()  # forgot the await
        return await ctx.step("after", tool, "after")

    with pytest.raises(durably.ConfigError, match=r"ctx\.now\(\) was never awaited"):
        engine.run(w, run_id="r")
    assert engine.get_run("r").status == "blocked"
    assert ran == []


def test_a_dropped_step_blocks_the_run_when_the_workflow_returns(engine: durably.Engine) -> None:
    @engine.workflow(name="w")
    async def w(ctx: durably.AsyncContext) -> str:
        ctx.step("forgotten", lambda: 1)
        return "done"

    with pytest.raises(durably.ConfigError, match=r"ctx\.step\('forgotten', \.\.\.\) was never"):
        engine.run(w, run_id="r")
    assert engine.get_run("r").status == "blocked"


def test_a_dropped_budget_blocks_the_run_instead_of_spending_without_limit(
    engine: durably.Engine,
) -> None:
    ran: list[str] = []

    def model() -> str:
        ran.append("model")
        durably.usage(tokens=1_000)
        return "text"

    @engine.workflow(name="w")
    async def w(ctx: durably.AsyncContext) -> str:
        ctx.budget(tokens=10)  # forgot the await: no budget would apply
        return await ctx.step("model", model)

    with pytest.raises(durably.ConfigError, match=r"ctx\.budget\(\.\.\.\) was never awaited"):
        engine.run(w, run_id="r")
    assert engine.get_run("r").status == "blocked"
    assert ran == []


def test_patched_without_await_blocks_the_run_instead_of_being_always_true(
    engine: durably.Engine,
) -> None:
    @engine.workflow(name="w")
    async def w(ctx: durably.AsyncContext) -> str:
        if ctx.patched("new-path"):  # forgot the await: a coroutine is always true
            return "new"
        return "old"

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a "never awaited" RuntimeWarning is not the message
        with pytest.raises(
            durably.ConfigError, match=r"write `value = await ctx\.patched\('new-path'\)`"
        ):
            engine.run(w, run_id="r")
    assert engine.get_run("r").status == "blocked"


def test_awaited_budget_patched_and_deprecate_patch_work_as_before(engine: durably.Engine) -> None:
    @engine.workflow(name="w")
    async def w(ctx: durably.AsyncContext) -> list[Any]:
        await ctx.budget(tokens=5, cost_usd=1.0)
        new = await ctx.patched("p")
        await ctx.deprecate_patch("gone")
        return [new, await ctx.step("a", lambda: "a")]

    assert engine.run(w, run_id="r") == [True, "a"]
    assert engine.run(w, run_id="r") == [True, "a"]
    spend = engine.spend("r")
    assert spend.budget == durably.Budget(tokens=5, cost_usd=1.0)


def test_an_error_in_arguments_is_the_workflows_not_a_dropped_step(engine: durably.Engine) -> None:
    @engine.workflow(name="w")
    async def w(ctx: durably.AsyncContext, data: dict[str, int]) -> list[int]:
        out: list[int] = await ctx.gather(
            ctx.step("a", lambda: 1), ctx.step("b", lambda x: x, data["missing"])
        )
        return out

    with pytest.raises(durably.WorkflowFailed, match="KeyError"):
        engine.run(w, {}, run_id="r")
    assert engine.get_run("r").status == "failed"


def test_a_call_cancelled_before_it_ran_records_nothing(engine: durably.Engine) -> None:
    @engine.workflow(name="w")
    async def w(ctx: durably.AsyncContext) -> list[Any]:
        task = asyncio.create_task(ctx.now())
        task.cancel()  # before the task's first step
        with pytest.raises(asyncio.CancelledError):
            await task
        return [await ctx.step("a", lambda: "a")]

    assert engine.run(w, run_id="r") == ["a"]
    assert [(s.position, s.name) for s in engine.history("r")] == [("0", "a")]
