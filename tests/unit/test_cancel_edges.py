"""Edges of cancellation found by review (issues 11 and 12): a cancel that arrives while a
step waits to retry, while gather branches are in flight, and before a person's retry of
a run that failed meanwhile. Real journals on both stores, on the fake clock; the cancel
comes from a second engine on the same journal (another process's view)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import durably
from durably.history import HALT, STEP
from durably.replaycheck import check_run


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'j.db'}"
    pg: str = request.getfixturevalue("pg_url")
    return pg


@pytest.fixture
def clock() -> durably.FakeClock:
    return durably.FakeClock()


@pytest.fixture
def engine(url: str, clock: durably.FakeClock) -> Iterator[durably.Engine]:
    with durably.Engine(url, clock=clock) as e:
        yield e


@pytest.fixture
def other(url: str, clock: durably.FakeClock) -> Iterator[durably.Engine]:
    """Another engine on the same journal: the canceller."""
    with durably.Engine(url, clock=clock) as e:
        yield e


def _shape(e: durably.Engine, run_id: str) -> list[tuple[str, str, str, str]]:
    return [(r.position, r.kind, r.name, r.status) for r in e.history(run_id)]


@pytest.mark.parametrize("effect", [False, True])
def test_a_cancel_during_a_retry_backoff_stops_the_retries_and_ends_cancelled(
    engine: durably.Engine, other: durably.Engine, clock: durably.FakeClock, effect: bool
) -> None:
    """Before: every remaining attempt ran under the cancel, and the step's final failure
    ended the run ``failed``, not ``cancelled``."""
    calls: list[str] = []

    @durably.step(retries=5, backoff=30, effect=effect)
    def flaky(*, idempotency_key: str) -> str:
        calls.append(idempotency_key)
        if len(calls) == 1:
            other.cancel("r", reason="not needed any more")
        raise ConnectionError("upstream down")

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> Any:
        ctx.step("a", lambda: "a")
        return ctx.step("f", flaky)

    with pytest.raises(durably.Cancelled, match="not needed any more"):
        engine.run(w, run_id="r")
    assert len(calls) == 1  # no attempt after the cancel
    run = engine.get_run("r")
    assert (run.status, run.error_message) == ("cancelled", "not needed any more")
    # The halt is recorded at the step's position (over its intent, for an effect)...
    assert _shape(engine, "r") == [
        ("0", STEP, "a", "ok"),
        ("1", HALT, "durably.cancel", "ok"),
    ]
    # ...so a replay raises Cancelled there, as the run did: no divergence, nothing runs.
    assert check_run(engine, run) is None
    assert len(calls) == 1


def test_a_cancel_during_a_retry_backoff_stops_an_async_step(
    engine: durably.Engine, other: durably.Engine
) -> None:
    calls: list[int] = []

    @durably.step(retries=3, backoff=5)
    async def flaky() -> str:
        calls.append(1)
        other.cancel("r", reason="stop")
        raise ConnectionError("upstream down")

    @engine.workflow(name="w")
    async def w(ctx: durably.AsyncContext) -> Any:
        return await ctx.step("f", flaky)

    with pytest.raises(durably.Cancelled):
        engine.run(w, run_id="r")
    assert len(calls) == 1
    assert engine.get_run("r").status == "cancelled"


def test_a_compensation_still_retries_under_the_cancel(
    engine: durably.Engine, other: durably.Engine
) -> None:
    """Only live work stops at a retry: a saga's undo keeps its own retries."""
    log: list[str] = []

    def book(n: int) -> str:
        log.append(f"book {n}")
        other.cancel("r", reason="called off")
        return f"b{n}"

    @durably.step(retries=2, backoff=1)
    def unbook(n: int) -> None:
        log.append(f"unbook {n}")
        if log.count(f"unbook {n}") == 1:
            raise ConnectionError("flaky undo")

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> None:
        with ctx.saga() as saga:
            saga.step("book", book, unbook, 1)
            saga.step("book2", book, unbook, 2)

    with pytest.raises(durably.Cancelled):
        engine.run(w, run_id="r")
    assert log == ["book 1", "unbook 1", "unbook 1"]
    assert engine.get_run("r").status == "cancelled"


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_cancel_that_arrives_during_compensation_lets_the_remaining_undos_run(
    engine: durably.Engine, other: durably.Engine, kind: str
) -> None:
    """The block failed and its undos run; a cancel asked for during the first undo must
    not cut the rest short (a booking left in place): every undo runs, in order."""
    log: list[str] = []

    def book(n: int) -> str:
        log.append(f"book {n}")
        return f"b{n}"

    def unbook(n: int) -> None:
        log.append(f"unbook {n}")
        if n == 3:
            other.cancel("r", reason="called off mid-undo")

    def pay() -> None:
        raise ValueError("card declined")

    if kind == "sync":

        @engine.workflow(name="w")
        def w(ctx: durably.Context) -> None:
            with ctx.saga() as saga:
                for n in (1, 2, 3):
                    saga.step(f"book{n}", book, unbook, n)
                ctx.step("pay", pay)

        wf: Any = w
    else:

        @engine.workflow(name="w")
        async def aw(ctx: durably.AsyncContext) -> None:
            async with ctx.saga() as saga:
                for n in (1, 2, 3):
                    await saga.step(f"book{n}", book, unbook, n)
                await ctx.step("pay", pay)

        wf = aw
    with pytest.raises((durably.WorkflowFailed, durably.Cancelled)):
        engine.run(wf, run_id="r")
    assert log == ["book 1", "book 2", "book 3", "unbook 3", "unbook 2", "unbook 1"]
    undone = [name for _, kind_, name, status in _shape(engine, "r") if status == "ok"]
    assert undone[-3:] == ["undo:book3", "undo:book2", "undo:book1"]
    # The block's failure came first and its compensation finished: it ends the run.
    run = engine.get_run("r")
    assert (run.status, run.error_type) == ("failed", "ValueError")


def test_a_cancel_under_a_gather_lets_a_saga_step_in_flight_finish_and_undoes_it(
    engine: durably.Engine, other: durably.Engine
) -> None:
    """Before: the branch that met the cancel made the gather cancel its sibling, whose
    sync step (in a thread: Python cannot stop it) still booked, unrecorded, so the saga
    never undid it. Now the latch stops the sibling after its step is recorded."""
    world: list[str] = []
    started = threading.Event()

    async def fast() -> str:
        while not started.is_set():  # the sibling's step is in flight
            await asyncio.sleep(0.005)
        other.cancel("r", reason="called off")
        world.append("book fast")
        return "fast"

    def slow() -> str:
        started.set()
        threading.Event().wait(0.3)  # still running when the cancel reaches the workflow
        world.append("book slow")
        return "slow"

    def undo(name: str) -> Any:
        def fn() -> None:
            world.append(f"undo {name}")

        return fn

    async def branch(ctx: durably.AsyncContext, saga: Any, name: str, do: Any) -> str:
        booked = await saga.step(name, do, undo(name))
        await ctx.step(f"{name} confirm", lambda: "confirmed")  # the cancel lands here
        return str(booked)

    @engine.workflow(name="w")
    async def w(ctx: durably.AsyncContext) -> Any:
        async with ctx.saga() as saga:
            return await ctx.gather(
                branch(ctx, saga, "fast", fast), branch(ctx, saga, "slow", slow)
            )

    with pytest.raises(durably.Cancelled, match="called off"):
        engine.run(w, run_id="r")
    # Both bookings recorded and undone, most recent position first; nothing else ran.
    assert world == ["book fast", "book slow", "undo slow", "undo fast"]
    run = engine.get_run("r")
    assert run.status == "cancelled"
    assert ("0.1.0", STEP, "slow", "ok") in _shape(engine, "r")
    assert check_run(engine, run) is None  # the replay unwinds the same way
    assert len(world) == 4


def test_a_retry_clears_a_cancel_the_failed_run_never_unwound_for(
    engine: durably.Engine, other: durably.Engine
) -> None:
    """A cancel seen while the last step failed for good: the run ends ``failed`` with
    the flag still set. Before, a person's ``durably retry`` queued it and the next
    driver ended it ``cancelled`` at once, without running the failed step again."""
    calls: list[int] = []

    def charge() -> str:
        calls.append(1)
        if len(calls) == 1:
            other.cancel("r", reason="too late")
            raise ValueError("card declined")
        return "charged"

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> Any:
        return ctx.step("charge", charge)

    with pytest.raises(durably.WorkflowFailed, match="card declined"):
        engine.run(w, run_id="r")
    assert engine.get_run("r").cancel_requested_at is not None
    queued = other.retry("r")
    assert (queued.status, queued.cancel_requested_at, queued.cancel_reason) == (
        "queued",
        None,
        None,
    )
    assert engine.resume("r") == "charged"
    assert len(calls) == 2
    assert engine.get_run("r").status == "completed"


def test_a_cancel_after_a_retry_still_stops_the_run(
    engine: durably.Engine, other: durably.Engine
) -> None:
    calls: list[str] = []

    def step(name: str) -> str:
        calls.append(name)
        if name == "a" and calls.count("a") == 1:
            raise ValueError("boom")
        if name == "a":
            other.cancel("r", reason="second thoughts")
        return name

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> Any:
        return [ctx.step("a", step, "a"), ctx.step("b", step, "b")]

    with pytest.raises(durably.WorkflowFailed):
        engine.run(w, run_id="r")
    other.retry("r")
    with pytest.raises(durably.Cancelled, match="second thoughts"):
        engine.resume("r")
    assert calls == ["a", "a"]
    assert engine.get_run("r").status == "cancelled"


def test_durably_cancel_on_a_run_cancelled_already_says_nothing_changed(
    engine: durably.Engine, url: str
) -> None:
    """Before: a second `durably cancel` of a run that had unwound printed "is cancelled
    (ended at once)" and `ended_at_once: true`, though this call changed nothing."""
    import json

    from click.testing import CliRunner

    from durably.cli import main

    def a() -> str:
        engine.cancel("r", reason="dup\x1b[31m alert")
        return "a"

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> Any:
        ctx.step("a", a)
        return ctx.step("b", lambda: "b")

    with pytest.raises(durably.Cancelled):
        engine.run(w, run_id="r")
    res = CliRunner().invoke(main, ["cancel", "r", "--reason", "again", "--db", url])
    assert res.exit_code == 0, res.output
    assert "was already cancelled" in res.output and "nothing changed" in res.output
    assert "ended at once" not in res.output
    assert "\x1b" not in res.output  # the first reason stays, shown escaped
    res = CliRunner().invoke(main, ["cancel", "r", "--json", "--db", url])
    said = json.loads(res.output)
    assert (said["ended_at_once"], said["already_cancelled"]) == (False, True)
    # A queued run that never ran still ends at once, and says so.
    engine.start(w, run_id="q")
    res = CliRunner().invoke(main, ["cancel", "q", "--json", "--db", url])
    said = json.loads(res.output)
    assert (said["status"], said["ended_at_once"], said["already_cancelled"]) == (
        "cancelled",
        True,
        False,
    )
    res = CliRunner().invoke(main, ["cancel", "nope", "--db", url])
    assert res.exit_code != 0 and "no run 'nope'" in res.output


def test_a_cancel_from_another_process_outranks_a_budget_crossed_in_the_same_step(
    engine: durably.Engine, other: durably.Engine
) -> None:
    """Before: the append that reported the cancel was ignored because a halt (the
    crossed budget) was already pending, so the run ended ``failed`` with BudgetExceeded
    although docs/api.md says a cancel asked for before the budget's halt reached the
    workflow replaces it."""

    def model() -> str:
        durably.usage(tokens=500)
        other.cancel("r", reason="operator stop")
        return "answer"

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> Any:
        ctx.budget(tokens=100)
        ctx.step("m", model)
        return ctx.step("next", lambda: "never")

    with pytest.raises(durably.Cancelled, match="operator stop"):
        engine.run(w, run_id="r")
    run = engine.get_run("r")
    assert (run.status, run.error_message) == ("cancelled", "operator stop")
    assert _shape(engine, "r")[-1] == ("1", HALT, "durably.cancel", "ok")


def test_replay_check_reports_a_cancelled_run_whose_new_code_raises_before_its_halt(
    engine: durably.Engine, other: durably.Engine
) -> None:
    """A cancelled run raises Cancelled at its recorded halt on replay: that is how it
    ended, not a divergence. New code that raises something else before reaching the
    halt would fail the run where it was cancelled: reported, naming the error."""
    new_code = {"on": False}

    def book() -> str:
        other.cancel("r", reason="called off")
        return "booked"

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> str:
        ctx.step("book", book)
        if new_code["on"]:
            raise RuntimeError("a check the new code makes")
        return ctx.step("pay", lambda: "paid")

    with pytest.raises(durably.Cancelled):
        engine.run(w, run_id="r")
    run = engine.get_run("r")
    assert run.status == "cancelled"
    assert check_run(engine, run) is None  # today's code ends at the halt, as live
    new_code["on"] = True
    found = check_run(engine, run)
    assert found is not None and found.kind == "diverges"
    assert "RuntimeError" in found.reason and "a check the new code makes" in found.reason


def test_replay_check_reports_a_failed_run_whose_new_code_raises_another_error(
    engine: durably.Engine,
) -> None:
    """A failed run raises its recorded failure again on replay: not a divergence. New
    code that raises another error on the way (before the recorded failure) would end
    the run differently on a retry: reported, naming the error."""
    new_code = {"on": False}

    def pay() -> str:
        raise ValueError("card declined")

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> str:
        ctx.step("book", lambda: "booked")
        if new_code["on"]:
            raise RuntimeError("a check the new code makes")
        return ctx.step("pay", pay)

    with pytest.raises(durably.WorkflowFailed, match="card declined"):
        engine.run(w, run_id="r")
    run = engine.get_run("r")
    assert (run.status, run.error_type) == ("failed", "ValueError")
    assert check_run(engine, run) is None  # today's code fails where it failed
    new_code["on"] = True
    found = check_run(engine, run)
    assert found is not None and found.kind == "diverges"
    assert "RuntimeError" in found.reason and "a check the new code makes" in found.reason
