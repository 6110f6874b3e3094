"""Async workflows and ctx.gather: positions that do not depend on completion order."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

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
    with pytest.raises(durably.NonDeterminism, match=r"step 0\.0\.0: history has 'a'"):
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


def test_sync_workflow_rejects_async_step_functions(engine: durably.Engine) -> None:
    async def model() -> str:
        return "x"

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> str:
        return ctx.step("m", model)

    with pytest.raises(durably.WorkflowFailed, match="async workflow"):
        engine.run(w, run_id="r")
