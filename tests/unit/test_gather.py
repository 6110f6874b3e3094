"""``ctx.gather`` is a recorded command: its record, the check on replay, failed gathers,
nesting and ``return_exceptions`` (real SQLite journals; the marker tests also PostgreSQL).

Real process deaths with a deploy between them: tests/crash/test_gather_deploy.py.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import durably
from durably import codec
from durably.history import BLOCKED, COMPLETED, GATHER, OK, STEP, StepRecord
from durably.store.base import NewRun, Owner


class Crash(BaseException):
    """Stands in for a process death inside one process (real deaths: tests/crash)."""


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[durably.Engine]:
    e = durably.Engine(f"sqlite:///{tmp_path / 'j.db'}")
    yield e
    e.close()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def any_engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[durably.Engine]:
    """An engine on each kind of store."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'j.db'}"
    else:
        url = request.getfixturevalue("pg_url")
    e = durably.Engine(url)
    yield e
    e.close()


class World:
    """The outside world: counts executions of each tool by name and by key."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.keys: dict[str, list[str]] = {}
        self.crash_at: str | None = None

    def tool(self, name: str) -> Callable[..., Awaitable[str]]:
        """An async keyed effect named ``name``."""

        @durably.step(effect=True)
        async def fn(*args: Any, idempotency_key: str) -> str:
            self.calls[name] += 1
            self.keys.setdefault(name, []).append(idempotency_key)
            await asyncio.sleep(0)
            return f"{name}:{idempotency_key}"

        fn.__name__ = fn.__qualname__ = name
        return fn

    async def checkpoint(self, where: str) -> str:
        """A step that crashes the "process" when ``crash_at`` names it."""
        if self.crash_at == where:
            raise Crash(where)
        return where


def gather_digest(labels: list[str]) -> str:
    """The digest a gather of branches with these labels records."""
    return codec.digest("durably.gather", [len(labels), labels], {})


def test_a_gather_records_its_arity_and_branch_labels(any_engine: durably.Engine) -> None:
    world = World()
    charge = world.tool("charge")

    async def notify(ctx: durably.AsyncContext) -> str:
        return await ctx.step("notify", world.tool("notify"), "ana")

    @any_engine.workflow(name="w")
    async def w(ctx: durably.AsyncContext) -> list[str]:
        await ctx.step("plan", world.checkpoint, "plan")
        out: list[str] = await ctx.gather(ctx.step("charge", charge, 10), notify(ctx))
        return out

    any_engine.run(w, run_id="r")
    hist = {s.position: s for s in any_engine.history("r")}
    assert set(hist) == {"0", "1", "1.0.0", "1.1.0"}
    marker = hist["1"]
    assert (marker.kind, marker.status) == (GATHER, OK)
    labels = ["charge", notify.__qualname__]
    assert codec.loads(marker.output or "") == [2, labels]
    assert marker.digest == gather_digest(labels)


def _deployed(world: World, deploy: dict[str, str]) -> Callable[..., Awaitable[list[str]]]:
    """The workflow as deployed first (``v1``) and after a change (the other variants):
    a deploy sets ``deploy["variant"]``."""
    charge_a, charge_b, charge_c = (world.tool(n) for n in ("charge_a", "charge_b", "charge_c"))

    async def wf(ctx: durably.AsyncContext) -> list[str]:
        variant = deploy["variant"]
        if variant != "removed_step":
            await ctx.step("plan", world.checkpoint, "plan")
        if variant == "inserted_now":
            await ctx.now()
        if variant == "other_label":
            second = ctx.step("charge_c", charge_c, 2)
        else:
            second = ctx.step("charge_b", charge_b, 2)
        branches = [ctx.step("charge_a", charge_a, 1), second]
        if variant == "added_branch":
            branches.append(ctx.step("charge_c", charge_c, 3))
        out: list[str] = await ctx.gather(*branches)
        await ctx.step("after", world.checkpoint, "after")
        return out

    return wf


@pytest.mark.parametrize("variant", ["inserted_now", "removed_step", "added_branch", "other_label"])
def test_a_deploy_that_shifts_or_changes_a_gather_blocks_before_any_branch_runs(
    any_engine: durably.Engine, variant: str
) -> None:
    world = World()
    deploy = {"variant": "v1"}
    any_engine.workflow(name="w")(_deployed(world, deploy))
    world.crash_at = "after"
    with pytest.raises(Crash):
        any_engine.run("w", run_id="r")
    assert world.calls == Counter({"charge_a": 1, "charge_b": 1})
    before = {s.position for s in any_engine.history("r")}

    deploy["variant"] = variant
    world.crash_at = None
    with pytest.raises(durably.NonDeterminism, match=r"gather"):
        any_engine.run("w", run_id="r")
    assert any_engine.get_run("r").status == BLOCKED
    assert world.calls == Counter({"charge_a": 1, "charge_b": 1})  # nothing went live
    assert {s.position for s in any_engine.history("r")} == before


def test_the_gather_mismatch_names_both_sides(engine: durably.Engine) -> None:
    world = World()
    deploy = {"variant": "v1"}
    engine.workflow(name="w")(_deployed(world, deploy))
    world.crash_at = "after"
    with pytest.raises(Crash):
        engine.run("w", run_id="r")
    deploy["variant"] = "added_branch"
    world.crash_at = None
    with pytest.raises(durably.NonDeterminism) as info:
        engine.run("w", run_id="r")
    text = str(info.value)
    assert "step 1" in text
    assert "2 branches ['charge_a', 'charge_b']" in text
    assert "3 branches ['charge_a', 'charge_b', 'charge_c']" in text


def _legacy_journal(engine: durably.Engine, run_id: str) -> None:
    """A journal as durably wrote it before gathers were recorded: the branches' steps
    under ``1.i.*``, nothing at the gather's position 1."""
    text = codec.dumps({"args": [], "kwargs": {}})
    import hashlib

    engine.store.create_run(
        NewRun(
            run_id,
            "w",
            None,
            None,
            "default",
            text,
            hashlib.sha256(text.encode()).hexdigest(),
            codec.CODEC_VERSION,
        )
    )
    run = engine.store.claim(run_id, Owner.current(), 30.0, 10, lambda owner: False)

    def rec(pos: str, name: str, args: tuple[Any, ...], output: Any) -> StepRecord:
        digest = codec.digest(name, args, {})
        return StepRecord(pos, STEP, name, digest, OK, codec.dumps(output), started_at=1.0)

    engine.store.append(
        run_id,
        run.fencing_token,
        [
            rec("0", "plan", ("plan",), "plan"),
            rec("1.0.0", "charge_a", (1,), "charge_a:old-key-a"),
            rec("1.1.0", "charge_b", (2,), "charge_b:old-key-b"),
        ],
    )
    engine.store.release(run_id, run.fencing_token)


def test_a_journal_from_before_gather_records_replays_without_the_check(
    any_engine: durably.Engine,
) -> None:
    world = World()
    _legacy_journal(any_engine, "old")
    any_engine.workflow(name="w")(_deployed(world, {"variant": "v1"}))
    assert any_engine.run("w", run_id="old") == ["charge_a:old-key-a", "charge_b:old-key-b"]
    assert world.calls == Counter()  # the recorded branches replayed
    assert any_engine.get_run("old").status == COMPLETED
    positions = sorted(s.position for s in any_engine.history("old"))
    assert positions == ["0", "1.0.0", "1.1.0", "2"]  # no marker added to an old journal


def test_a_failed_gather_replays_without_leaving_a_sibling_unconsumed(
    engine: durably.Engine,
) -> None:
    world = World()
    sibling_done = asyncio.Event()

    async def pay() -> str:
        await sibling_done.wait()  # live: fail only after the sibling recorded both steps
        raise ValueError("card declined")

    async def sibling(ctx: durably.AsyncContext) -> list[str]:
        x = await ctx.step("x", world.tool("x"), 1)
        # On replay the recorded failure of ``pay`` comes back at once, so the gather
        # cancels this branch here, before it asks for its second recorded step.
        await asyncio.sleep(0.05)
        y = await ctx.step("y", world.tool("y"), 2)
        sibling_done.set()
        return [x, y]

    @engine.workflow(name="w")
    async def w(ctx: durably.AsyncContext) -> str:
        try:
            await ctx.gather(ctx.step("pay", pay), sibling(ctx))
        except durably.StepFailed as exc:
            outcome = f"declined: {exc.message}"
        await ctx.step("after", world.checkpoint, "after")
        return outcome

    world.crash_at = "after"
    with pytest.raises(Crash):
        engine.run(w, run_id="r")
    assert {s.position for s in engine.history("r")} >= {"0.0.0", "0.1.0", "0.1.1"}
    world.crash_at = None
    assert engine.run(w, run_id="r") == "declined: card declined"
    assert engine.get_run("r").status == COMPLETED
    assert world.calls == Counter({"x": 1, "y": 1})


def test_unconsumed_positions_outside_a_failed_gather_are_still_caught(
    engine: durably.Engine,
) -> None:
    world = World()
    extra = {"on": True}

    async def boom() -> None:
        raise ValueError("boom")

    @engine.workflow(name="w")
    async def w(ctx: durably.AsyncContext) -> str:
        try:
            await ctx.gather(ctx.step("boom", boom))
        except durably.StepFailed:
            pass
        if extra["on"]:
            await ctx.step("extra", world.tool("extra"))
        await ctx.step("after", world.checkpoint, "after")
        return "done"

    world.crash_at = "after"
    with pytest.raises(Crash):
        engine.run(w, run_id="r")
    extra["on"] = False
    world.crash_at = None
    with pytest.raises(durably.NonDeterminism, match=r"step 1: history has 'extra'"):
        engine.run(w, run_id="r")


def test_nested_gathers_have_stable_positions_and_keys(any_engine: durably.Engine) -> None:
    world = World()

    async def side(ctx: durably.AsyncContext, tag: str) -> list[str]:
        first = await ctx.step(f"{tag}-first", world.tool(f"{tag}-first"), tag)
        pair: list[str] = await ctx.gather(
            ctx.step(f"{tag}-x", world.tool(f"{tag}-x")),
            ctx.step(f"{tag}-y", world.tool(f"{tag}-y")),
        )
        return [first, *pair]

    @any_engine.workflow(name="w")
    async def w(ctx: durably.AsyncContext) -> list[list[str]]:
        for i in range(4):
            await ctx.step(f"s{i}", world.checkpoint, f"s{i}")
        out: list[list[str]] = await ctx.gather(side(ctx, "L"), side(ctx, "R"))
        await ctx.step("after", world.checkpoint, "after")
        return out

    world.crash_at = "after"
    with pytest.raises(Crash):
        any_engine.run(w, run_id="r")
    world.crash_at = None
    result = any_engine.run(w, run_id="r")
    assert all(n == 1 for n in world.calls.values()) and len(world.calls) == 6
    assert world.keys["R-first"][0].endswith(":4.1.0")
    assert world.keys["L-y"][0].endswith(":4.0.1.1.0")
    assert result[1][0] == f"R-first:{world.keys['R-first'][0]}"
    kinds = {s.position: s.kind for s in any_engine.history("r")}
    assert {p for p, k in kinds.items() if k == GATHER} == {"4", "4.0.1", "4.1.1"}
    assert {p for p, k in kinds.items() if k == STEP and p.startswith("4.")} == {
        "4.0.0",
        "4.0.1.0.0",
        "4.0.1.1.0",
        "4.1.0",
        "4.1.1.0.0",
        "4.1.1.1.0",
    }


def test_a_changed_nested_gather_is_caught_at_its_own_position(engine: durably.Engine) -> None:
    world = World()
    arity = {"n": 2}

    async def side(ctx: durably.AsyncContext) -> list[str]:
        await ctx.step("first", world.tool("first"))
        steps = [ctx.step(f"leaf{i}", world.tool(f"leaf{i}")) for i in range(arity["n"])]
        out: list[str] = await ctx.gather(*steps)
        return out

    @engine.workflow(name="w")
    async def w(ctx: durably.AsyncContext) -> list[list[str]]:
        out: list[list[str]] = await ctx.gather(side(ctx))
        await ctx.step("after", world.checkpoint, "after")
        return out

    world.crash_at = "after"
    with pytest.raises(Crash):
        engine.run(w, run_id="r")
    arity["n"] = 3
    world.crash_at = None
    with pytest.raises(durably.NonDeterminism, match=r"step 0\.0\.1: .*gather"):
        engine.run(w, run_id="r")
    assert world.calls["leaf2"] == 0


def test_return_exceptions_returns_failures_in_place_live_and_on_replay(
    any_engine: durably.Engine,
) -> None:
    world = World()

    async def bad() -> str:
        raise ValueError("no such city")

    @any_engine.workflow(name="w")
    async def w(ctx: durably.AsyncContext) -> list[str]:
        out = await ctx.gather(
            ctx.step("good", world.tool("good")),
            ctx.step("bad", bad),
            return_exceptions=True,
        )
        await ctx.step("after", world.checkpoint, "after")
        return [o if isinstance(o, str) else f"{type(o).__name__}: {o.message}" for o in out]

    world.crash_at = "after"
    with pytest.raises(Crash):
        any_engine.run(w, run_id="r")
    world.crash_at = None
    result = any_engine.run(w, run_id="r")
    assert result == [f"good:{world.keys['good'][0]}", "StepFailed: no such city"]
    assert world.calls == Counter({"good": 1})
    assert [s.kind for s in any_engine.history("r")][:1] == [GATHER]


def test_return_exceptions_does_not_swallow_a_run_that_must_stop(engine: durably.Engine) -> None:
    world = World()

    async def crash() -> str:
        raise Crash("process died in a branch")

    @engine.workflow(name="w")
    async def w(ctx: durably.AsyncContext) -> list[Any]:
        out = await ctx.gather(ctx.step("crash", crash), return_exceptions=True)
        await ctx.step("after", world.tool("after"))
        return list(out)

    with pytest.raises(Crash):
        engine.run(w, run_id="r")
    assert world.calls == Counter()  # nothing ran after the branch's process "died"


def test_gather_refuses_a_started_coroutine_without_a_warning(engine: durably.Engine) -> None:
    async def helper() -> int:
        await asyncio.sleep(0)
        return 1

    @engine.workflow(name="w")
    async def w(ctx: durably.AsyncContext) -> int:
        coro = helper()
        coro.send(None)  # started by hand
        try:
            await ctx.gather(coro, ctx.step("a", helper))
        finally:
            coro.close()
        return 0

    with pytest.raises(durably.WorkflowFailed, match="have not started"):
        engine.run(w, run_id="r")
    assert engine.history("r") == []
