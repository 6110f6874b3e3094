"""Edges of sagas under ``ctx.gather`` found by review (issue 12): a sibling branch that
fails while another branch's saga compensates must not cut the compensation short."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import durably
from durably.history import COMPENSATE, FAILED, OK, STEP
from durably.replaycheck import check_run


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[durably.Engine]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'j.db'}"
    else:
        url = request.getfixturevalue("pg_url")
    with durably.Engine(url, clock=durably.FakeClock()) as e:
        yield e


def test_a_failing_sibling_does_not_cut_a_branchs_compensation_short(
    engine: durably.Engine,
) -> None:
    """Before: branch 0's saga failed and began undoing; branch 1 failed meanwhile, and
    the gather cancelled branch 0 in its first undo: the compensate marker was recorded,
    neither booking was undone, the run failed naming only the sibling's error, and a
    retry was refused because the saga 'compensated'."""
    world: list[str] = []
    compensating = asyncio.Event()

    async def book(n: int) -> int:
        world.append(f"book {n}")
        return n

    async def pay() -> None:
        raise ValueError("card declined")

    async def unbook(n: int) -> None:
        compensating.set()
        await asyncio.sleep(0.05)  # the sibling fails while this undo is in flight
        world.append(f"unbook {n}")

    async def other() -> None:
        await compensating.wait()
        raise ValueError("sibling fails")

    async def trip(ctx: durably.AsyncContext) -> None:
        async with ctx.saga() as saga:
            await saga.step("b1", book, unbook, 1)
            await saga.step("b2", book, unbook, 2)
            await ctx.step("pay", pay)

    @engine.workflow(name="w")
    async def w(ctx: durably.AsyncContext) -> Any:
        await ctx.gather(trip(ctx), ctx.step("other", other))

    with pytest.raises(durably.WorkflowFailed):
        engine.run(w, run_id="r")
    assert world == ["book 1", "book 2", "unbook 2", "unbook 1"]
    shape = [(r.position, r.kind, r.name, r.status) for r in engine.history("r")]
    assert shape[4:] == [
        ("0.0.3", COMPENSATE, "durably.compensate", OK),
        ("0.0.4", STEP, "undo:b2", OK),
        ("0.0.5", STEP, "undo:b1", OK),
        ("0.1.0", STEP, "other", FAILED),
    ]
    run = engine.get_run("r")
    assert run.status == "failed"
    assert check_run(engine, run) is None  # the replay compensates the same way
    assert len(world) == 4


def test_a_failing_sibling_does_not_cut_short_a_saga_nested_in_a_deeper_gather(
    engine: durably.Engine,
) -> None:
    """The compensating saga runs in a branch of an inner gather, itself a branch of the
    outer one: cancelling the outer branch (its sibling failed) must not reach the
    inner branch's undos through the inner gather."""
    world: list[str] = []
    compensating = asyncio.Event()

    async def book(n: int) -> int:
        world.append(f"book {n}")
        return n

    async def pay() -> None:
        raise ValueError("card declined")

    async def unbook(n: int) -> None:
        compensating.set()
        await asyncio.sleep(0.05)  # the outer sibling fails while this undo is in flight
        world.append(f"unbook {n}")

    async def other() -> None:
        await compensating.wait()
        raise ValueError("sibling fails")

    async def trip(ctx: durably.AsyncContext) -> None:
        async with ctx.saga() as saga:
            await saga.step("b1", book, unbook, 1)
            await saga.step("b2", book, unbook, 2)
            await ctx.step("pay", pay)

    async def inner(ctx: durably.AsyncContext) -> Any:
        return await ctx.gather(trip(ctx), ctx.step("noop", book, 0))

    @engine.workflow(name="w")
    async def w(ctx: durably.AsyncContext) -> Any:
        await ctx.gather(inner(ctx), ctx.step("other", other))

    with pytest.raises(durably.WorkflowFailed):
        engine.run(w, run_id="r")
    assert [x for x in world if x != "book 0"] == ["book 1", "book 2", "unbook 2", "unbook 1"]
    undone = [r.name for r in engine.history("r") if r.name.startswith("undo:")]
    assert undone == ["undo:b2", "undo:b1"]
    run = engine.get_run("r")
    assert run.status == "failed"
    assert check_run(engine, run) is None
