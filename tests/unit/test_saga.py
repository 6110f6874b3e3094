"""Sagas: ``with ctx.saga() as saga: saga.step(name, do, undo, ...)`` (real SQLite files,
and PostgreSQL where the store's part matters; a fake clock for retry backoffs).

Compensation order, ``result=``, the async form, what does and does not compensate, a
failing compensation, the refused retry, nesting, gathers, misuse, and a halt (cancel)
delivered mid-saga. Real SIGKILLs during compensation: tests/crash/test_saga_crash.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import durably
from durably import codec
from durably.history import BLOCKED, COMPENSATE, FAILED, HALT, OK, STEP, idempotency_key


class Crash(BaseException):
    """Stands in for a process death inside one process (real deaths: tests/crash)."""


def _url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'j.db'}"
    url: str = request.getfixturevalue("pg_url")
    return url


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[durably.Engine]:
    e = durably.Engine(f"sqlite:///{tmp_path / 'j.db'}", clock=durably.FakeClock())
    yield e
    e.close()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def any_engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[durably.Engine]:
    """An engine on each kind of store, on a fake clock."""
    e = durably.Engine(_url(request, tmp_path), clock=durably.FakeClock())
    yield e
    e.close()


class World:
    """The outside world: what each do and undo did, in order."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self.keys: dict[str, str] = {}

    def do(self, name: str) -> Callable[..., Any]:
        def fn(n: int, *, idempotency_key: str) -> dict[str, Any]:
            self.log.append(f"do {name}")
            self.keys[f"do {name}"] = idempotency_key
            return {"booked": name, "n": n}

        return fn

    def undo(self, name: str) -> Callable[..., Any]:
        def fn(n: int, *, idempotency_key: str, result: dict[str, Any]) -> str:
            assert result == {"booked": name, "n": n}  # do's recorded result
            self.log.append(f"undo {name}")
            self.keys[f"undo {name}"] = idempotency_key
            return f"cancelled {name}"

        return fn

    def fail(self, name: str) -> Callable[..., Any]:
        def fn(n: int) -> None:
            self.log.append(f"do {name}")
            raise ValueError(f"{name}: no seats left")

        return fn


def _trip(e: durably.Engine, world: World, *, fail_at: int = 3) -> durably.Workflow:
    @e.workflow(name="trip")
    def trip(ctx: durably.Context) -> list[Any]:
        out = []
        with ctx.saga() as saga:
            for i, name in enumerate(("flight", "hotel", "car", "tour")):
                do = world.fail(name) if i == fail_at else world.do(name)
                out.append(saga.step(name, do, world.undo(name), i))
        return out

    return trip


def _shape(e: durably.Engine, run_id: str) -> list[tuple[str, str, str, str]]:
    return [(r.position, r.kind, r.name, r.status) for r in e.history(run_id)]


def test_a_permanent_failure_at_step_3_of_4_compensates_2_1_0_in_order(
    any_engine: durably.Engine,
) -> None:
    world = World()
    trip = _trip(any_engine, world)
    with pytest.raises(durably.WorkflowFailed) as failed:
        any_engine.run(trip, run_id="r")
    assert failed.value.type_name == "ValueError"  # the original failure goes on
    assert failed.value.message == "tour: no seats left"
    assert any_engine.get_run("r").status == "failed"
    assert world.log == [
        "do flight",
        "do hotel",
        "do car",
        "do tour",
        "undo car",
        "undo hotel",
        "undo flight",
    ]
    assert _shape(any_engine, "r") == [
        ("0", STEP, "flight", OK),
        ("1", STEP, "hotel", OK),
        ("2", STEP, "car", OK),
        ("3", STEP, "tour", FAILED),
        ("4", COMPENSATE, "durably.compensate", OK),
        ("5", STEP, "undo:car", OK),
        ("6", STEP, "undo:hotel", OK),
        ("7", STEP, "undo:flight", OK),
    ]
    marker = any_engine.history("r")[4]
    assert codec.loads(marker.output or "") == {
        "steps": ["2", "1", "0"],
        "error": "step 3 'tour' failed: ValueError: tour: no seats left",
    }
    # Each compensation has its own key: the one of its own position.
    inc = any_engine.get_run("r").incarnation
    assert world.keys["undo car"] == idempotency_key("r", inc, "5")
    assert world.keys["undo flight"] == idempotency_key("r", inc, "7")
    assert world.keys["do car"] == idempotency_key("r", inc, "2")
    # The finished run replays nothing and runs nothing again.
    with pytest.raises(durably.WorkflowFailed):
        any_engine.run(trip, run_id="r")
    assert len(world.log) == 7


def test_undo_gets_dos_arguments_and_result_only_when_it_asks_for_it(
    engine: durably.Engine,
) -> None:
    seen: list[Any] = []

    def book(city: str, *, nights: int) -> dict[str, Any]:
        return {"id": f"H-{city}", "nights": nights}

    def cancel_with_result(city: str, *, nights: int, result: dict[str, Any]) -> None:
        seen.append(("with", city, nights, result))

    def cancel_plain(city: str, *, nights: int) -> None:
        seen.append(("plain", city, nights))

    @e_workflow(engine)
    def w(ctx: durably.Context) -> None:
        with ctx.saga() as saga:
            got = saga.step("a", book, cancel_with_result, "Oslo", nights=2)
            assert got == {"id": "H-Oslo", "nights": 2}
            saga.step("b", book, cancel_plain, "Rome", nights=3)
            raise RuntimeError("the plan changed")

    with pytest.raises(durably.WorkflowFailed, match="the plan changed"):
        engine.run(w, run_id="r")
    assert seen == [
        ("plain", "Rome", 3),
        ("with", "Oslo", 2, {"id": "H-Oslo", "nights": 2}),
    ]
    marker = engine.history("r")[2]
    assert codec.loads(marker.output or "")["error"] == "RuntimeError: the plan changed"


def test_undo_gets_the_result_as_recorded_even_if_the_workflow_changed_it(
    engine: durably.Engine,
) -> None:
    seen: list[Any] = []

    def book(city: str) -> dict[str, Any]:
        return {"id": f"H-{city}", "rooms": [1, 2]}

    def cancel(city: str, result: dict[str, Any]) -> None:
        seen.append(result)

    @e_workflow(engine)
    def w(ctx: durably.Context) -> None:
        with ctx.saga() as saga:
            got = saga.step("a", book, cancel, "Oslo")
            got["id"] = "changed"  # the workflow's own copy
            got["rooms"].append(3)
            raise RuntimeError("stop")

    with pytest.raises(durably.WorkflowFailed):
        engine.run(w, run_id="r")
    assert seen == [{"id": "H-Oslo", "rooms": [1, 2]}]


def e_workflow(e: durably.Engine) -> Callable[[Callable[..., Any]], durably.Workflow]:
    return e.workflow(name="w")


def test_async_saga_compensates_in_reverse_order(any_engine: durably.Engine) -> None:
    log: list[str] = []

    async def do(name: str) -> str:
        await asyncio.sleep(0)
        log.append(f"do {name}")
        return name.upper()

    async def undo(name: str, result: str) -> None:
        log.append(f"undo {name} ({result})")

    def sync_undo(name: str) -> None:  # a sync compensation in an async workflow
        log.append(f"undo {name}")

    @durably.step(no_retry=(KeyError,))
    async def explode(name: str) -> None:
        raise KeyError(name)

    @any_engine.workflow(name="w")
    async def w(ctx: durably.AsyncContext) -> None:
        async with ctx.saga() as saga:
            await saga.step("a", do, undo, "a")
            await saga.step("b", do, sync_undo, "b")
            await saga.step("c", do, undo, "c")
            await saga.step("boom", explode, undo, "boom")

    with pytest.raises(durably.WorkflowFailed):
        any_engine.run(w, run_id="r")
    assert log == ["do a", "do b", "do c", "undo c (C)", "undo b", "undo a (A)"]
    assert [n for _, _, n, _ in _shape(any_engine, "r")][4:] == [
        "durably.compensate",
        "undo:c",
        "undo:b",
        "undo:a",
    ]


def test_no_compensation_on_success(engine: durably.Engine) -> None:
    world = World()
    trip = _trip(engine, world, fail_at=99)
    assert [r["booked"] for r in engine.run(trip, run_id="r")] == [
        "flight",
        "hotel",
        "car",
        "tour",
    ]
    assert not [line for line in world.log if line.startswith("undo")]
    assert [k for _, k, _, _ in _shape(engine, "r")] == [STEP] * 4


def test_no_compensation_on_a_stop_then_compensation_after_the_resume(
    engine: durably.Engine,
) -> None:
    """A BaseException (here an injected crash in the failing step's process) is never a
    reason to compensate: the run is given back untouched; resumed, the failure happens
    for real and compensation runs then, once."""
    world = World()
    crashes = [1]

    def tour(n: int) -> None:
        world.log.append("do tour")
        if crashes:
            crashes.pop()
            raise Crash("the process died")
        raise ValueError("no seats left")

    @engine.workflow(name="trip")
    def trip(ctx: durably.Context) -> None:
        with ctx.saga() as saga:
            saga.step("flight", world.do("flight"), world.undo("flight"), 0)
            saga.step("tour", tour, world.undo("tour"), 1)

    with pytest.raises(Crash):
        engine.run(trip, run_id="r")
    assert world.log == ["do flight", "do tour"]
    assert engine.get_run("r").status != "failed"
    assert [k for _, k, _, _ in _shape(engine, "r")] == [STEP]
    with pytest.raises(durably.WorkflowFailed):
        engine.run(trip, run_id="r")
    assert world.log == ["do flight", "do tour", "do tour", "undo flight"]


def test_no_compensation_when_a_bare_except_turns_a_stop_into_an_exception(
    engine: durably.Engine,
) -> None:
    """The core's latched stop decides, not what the workflow made of it."""
    world = World()

    def lose_lease() -> None:
        engine._attempts.active["r"].core.lose_lease()  # another owner claimed the run

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> None:
        with ctx.saga() as saga:
            saga.step("flight", world.do("flight"), world.undo("flight"), 0)
            try:
                saga.step("hotel", lambda n: lose_lease(), world.undo("hotel"), 1)
            except BaseException as exc:  # the point of the test: a stop turned ordinary
                raise RuntimeError("swallowed") from exc

    with pytest.raises(durably.StaleLease):
        engine.run(w, run_id="r")
    assert world.log == ["do flight"]


def test_no_compensation_when_the_run_is_blocked(engine: durably.Engine) -> None:
    world = World()

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> None:
        with ctx.saga() as saga:
            saga.step("flight", world.do("flight"), world.undo("flight"), 0)
            ctx.step("", world.do("x"))  # a ConfigError in the code: the run is blocked

    with pytest.raises(durably.ConfigError):
        engine.run(w, run_id="r")
    assert engine.get_run("r").status == BLOCKED
    assert world.log == ["do flight"]


def test_a_compensation_that_keeps_failing_ends_the_run_failed_naming_both_errors(
    any_engine: durably.Engine,
) -> None:
    world = World()
    attempts: list[int] = []

    @durably.step(retries=2, backoff=0.5)
    def cancel_hotel(n: int) -> None:
        attempts.append(n)
        raise ConnectionError("hotel API down")

    @any_engine.workflow(name="trip")
    def trip(ctx: durably.Context) -> None:
        with ctx.saga() as saga:
            saga.step("flight", world.do("flight"), world.undo("flight"), 0)
            saga.step("hotel", world.do("hotel"), cancel_hotel, 1)
            saga.step("car", world.do("car"), world.undo("car"), 2)
            saga.step("tour", world.fail("tour"), world.undo("tour"), 3)

    with pytest.raises(durably.WorkflowFailed) as failed:
        any_engine.run(trip, run_id="r")
    assert attempts == [1, 1, 1]  # its own retries first
    # Best effort: the flight was still cancelled after the hotel's compensation failed.
    assert world.log[-2:] == ["undo car", "undo flight"]
    run = any_engine.get_run("r")
    assert run.status == "failed"
    assert failed.value.type_name == "durably.errors.CompensationFailed"
    msg = failed.value.message
    assert "step 6 'undo:hotel' failed: ConnectionError: hotel API down" in msg
    assert "It was compensating for: step 3 'tour' failed: ValueError: tour: no seats left" in msg
    assert "1 of 3 compensations failed, the other 2 ran" in msg
    assert run.error_message == msg
    # The same outcome on a replay of the finished run (and nothing runs again).
    with pytest.raises(durably.WorkflowFailed) as again:
        any_engine.run(trip, run_id="r")
    assert again.value.message == msg
    assert attempts == [1, 1, 1]


def test_compensation_failed_carries_both_errors_in_the_workflow() -> None:
    """What a workflow that catches it sees (the class is public)."""
    step_failed = durably.StepFailed("undo:hotel", "5", "ConnectionError", "down")
    exc = durably.CompensationFailed("r", "step 3 'tour' failed: X: y", (step_failed,), 1)
    assert isinstance(exc, durably.DurablyError)
    assert exc.failures == (step_failed,) and exc.total == 1
    assert "1 of 1 compensations failed" in str(exc)
    assert "step 3 'tour' failed: X: y" in str(exc) and "undo:hotel" in str(exc)


def test_retry_of_a_compensated_run_is_refused_naming_the_fork(
    any_engine: durably.Engine,
) -> None:
    world = World()

    @any_engine.workflow(name="trip")
    def trip(ctx: durably.Context) -> str:
        ctx.step("plan", lambda: "plan")  # before the saga: never undone
        with ctx.saga() as saga:
            saga.step("flight", world.do("flight"), world.undo("flight"), 0)
            saga.step("tour", world.fail("tour"), world.undo("tour"), 1)
        return "done"

    with pytest.raises(durably.WorkflowFailed):
        any_engine.run(trip, run_id="r")
    before = _shape(any_engine, "r")
    with pytest.raises(durably.ConfigError) as refused:
        any_engine.retry("r")
    msg = str(refused.value)
    assert "saga compensated it (the steps at 1 were undone)" in msg
    assert "`durably fork r --at 1`" in msg
    assert "Nothing was changed" in msg
    assert any_engine.get_run("r").status == "failed"
    assert _shape(any_engine, "r") == before
    # The fork it names redoes the saga under new keys and keeps the plan.
    handle = any_engine.fork("r", at=1, new_run_id="r2")
    with pytest.raises(durably.WorkflowFailed):
        any_engine.resume(handle.run_id)
    assert world.log.count("do flight") == 2 and world.log.count("undo flight") == 2
    assert world.keys["do flight"] != idempotency_key("r", any_engine.get_run("r").incarnation, "1")


def test_retry_names_a_failed_compensation_to_undo_by_hand(engine: durably.Engine) -> None:
    world = World()

    @engine.workflow(name="trip")
    def trip(ctx: durably.Context) -> None:
        with ctx.saga() as saga:
            saga.step("flight", world.do("flight"), world.fail("flight-undo"), 0)
            saga.step("tour", world.fail("tour"), world.undo("tour"), 1)

    with pytest.raises(durably.WorkflowFailed):
        engine.run(trip, run_id="r")
    with pytest.raises(durably.ConfigError, match="undo it by hand") as refused:
        engine.retry("r")
    assert "--at 0" in str(refused.value)


def test_a_user_step_named_like_a_compensation_does_not_block_retry(
    engine: durably.Engine,
) -> None:
    """Compensation is told by its marker, not by a step's name."""
    calls: list[str] = []

    def flaky() -> str:
        calls.append("undo:x")
        if len(calls) == 1:
            raise ValueError("first time")
        return "ok"

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> str:
        return ctx.step("undo:x", flaky)

    with pytest.raises(durably.WorkflowFailed):
        engine.run(w, run_id="r")
    engine.retry("r")
    assert engine.run(w, run_id="r") == "ok"


def test_a_crash_during_compensation_resumes_without_repeating_finished_ones(
    any_engine: durably.Engine,
) -> None:
    """In one process (the real SIGKILL: tests/crash/test_saga_crash.py)."""
    world = World()
    kills = {("6", "undo:hotel", "recorded")}

    def hook(run_id: str, pos: str, name: str, window: str) -> None:
        if (pos, name, window) in kills:
            kills.discard((pos, name, window))
            raise Crash("killed after undo:hotel was recorded")

    any_engine.fault_hook = hook
    trip = _trip(any_engine, world)
    with pytest.raises(Crash):
        any_engine.run(trip, run_id="r")
    assert world.log[-2:] == ["undo car", "undo hotel"]
    with pytest.raises(durably.WorkflowFailed):
        any_engine.run(trip, run_id="r")
    assert world.log == [
        "do flight",
        "do hotel",
        "do car",
        "do tour",
        "undo car",
        "undo hotel",
        "undo flight",
    ]


def test_nested_saga_hands_its_steps_to_the_outer_one_on_success(
    engine: durably.Engine,
) -> None:
    world = World()

    @engine.workflow(name="trip")
    def trip(ctx: durably.Context) -> None:
        with ctx.saga() as outer:
            outer.step("flight", world.do("flight"), world.undo("flight"), 0)
            with ctx.saga() as inner:
                inner.step("hotel", world.do("hotel"), world.undo("hotel"), 1)
                inner.step("car", world.do("car"), world.undo("car"), 2)
            outer.step("tour", world.fail("tour"), world.undo("tour"), 3)

    with pytest.raises(durably.WorkflowFailed):
        engine.run(trip, run_id="r")
    assert world.log[4:] == ["undo car", "undo hotel", "undo flight"]


def test_a_failing_nested_saga_compensates_itself_then_the_outer_one(
    engine: durably.Engine,
) -> None:
    world = World()

    @engine.workflow(name="trip")
    def trip(ctx: durably.Context) -> None:
        with ctx.saga() as outer:
            outer.step("flight", world.do("flight"), world.undo("flight"), 0)
            with ctx.saga() as inner:
                inner.step("hotel", world.do("hotel"), world.undo("hotel"), 1)
                inner.step("tour", world.fail("tour"), world.undo("tour"), 2)

    with pytest.raises(durably.WorkflowFailed):
        engine.run(trip, run_id="r")
    assert world.log[3:] == ["undo hotel", "undo flight"]
    kinds = [(p, k) for p, k, _, _ in _shape(engine, "r") if k == COMPENSATE]
    assert kinds == [("3", COMPENSATE), ("5", COMPENSATE)]  # one marker per saga


def test_a_caught_failure_inside_the_block_is_not_compensated(engine: durably.Engine) -> None:
    world = World()

    @engine.workflow(name="trip")
    def trip(ctx: durably.Context) -> str:
        with ctx.saga() as saga:
            saga.step("flight", world.do("flight"), world.undo("flight"), 0)
            try:
                saga.step("tour", world.fail("tour"), world.undo("tour"), 1)
            except durably.StepFailed:
                pass  # the workflow decided the tour is optional
            saga.step("car", world.do("car"), world.undo("car"), 2)
        return "ok"

    assert engine.run(trip, run_id="r") == "ok"
    assert not [line for line in world.log if line.startswith("undo")]


@pytest.mark.parametrize("misuse", ["after", "before", "twice"])
def test_saga_misuse_blocks_the_run_and_says_what_to_do(
    engine: durably.Engine, misuse: str
) -> None:
    world = World()

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> None:
        saga = ctx.saga()
        if misuse == "before":
            saga.step("flight", world.do("flight"), world.undo("flight"), 0)
        with saga:
            saga.step("flight", world.do("flight"), world.undo("flight"), 0)
        if misuse == "after":
            saga.step("hotel", world.do("hotel"), world.undo("hotel"), 1)
        with saga:
            pass

    with pytest.raises(durably.ConfigError) as err:
        engine.run(w, run_id="r")
    expect = {
        "after": "after its block ended",
        "before": "before its block began",
        "twice": "a saga was entered twice",
    }[misuse]
    assert expect in str(err.value)
    assert engine.get_run("r").status == BLOCKED
    assert not [line for line in world.log if line.startswith("undo")]


def test_an_undo_that_is_not_callable_or_collides_on_result_blocks(
    engine: durably.Engine,
) -> None:
    def do(*, result: int) -> int:
        return result

    def undo(*, result: int) -> None:
        pass

    @engine.workflow(name="w")
    def w(ctx: durably.Context, which: str) -> None:
        with ctx.saga() as saga:
            if which == "callable":
                saga.step("a", do, "not a function", result=1)
            else:
                saga.step("a", do, undo, result=1)

    with pytest.raises(durably.ConfigError, match="is not callable"):
        engine.run(w, "callable", run_id="r1")
    with pytest.raises(durably.ConfigError, match="would collide"):
        engine.run(w, "collide", run_id="r2")


def test_async_saga_misuse_of_with_blocks(engine: durably.Engine) -> None:
    @engine.workflow(name="w")
    async def w(ctx: durably.AsyncContext) -> None:
        with ctx.saga():  # type: ignore[attr-defined]
            pass

    with pytest.raises(durably.ConfigError, match=r"async with ctx\.saga"):
        engine.run(w, run_id="r")


def test_saga_steps_in_a_gather_compensate_by_position(engine: durably.Engine) -> None:
    log: list[str] = []
    slow_first = {"a": 0.03, "b": 0.0}  # b completes first: order stays by position

    async def do(name: str) -> str:
        await asyncio.sleep(slow_first.get(name, 0))
        log.append(f"do {name}")
        return name

    async def undo(name: str) -> None:
        log.append(f"undo {name}")

    async def fail(name: str) -> None:
        raise ValueError(name)

    @engine.workflow(name="w")
    async def w(ctx: durably.AsyncContext) -> None:
        async with ctx.saga() as saga:
            await saga.step("first", do, undo, "first")
            await ctx.gather(saga.step("a", do, undo, "a"), saga.step("b", do, undo, "b"))
            await saga.step("last", fail, undo, "last")

    with pytest.raises(durably.WorkflowFailed):
        engine.run(w, run_id="r")
    assert log == ["do first", "do b", "do a", "undo b", "undo a", "undo first"]
    marker = next(r for r in engine.history("r") if r.kind == COMPENSATE)
    assert codec.loads(marker.output or "")["steps"] == ["1.1.0", "1.0.0", "0"]


def test_a_saga_inside_a_gather_branch_compensates_its_own_block(
    engine: durably.Engine,
) -> None:
    log: list[str] = []

    async def do(name: str) -> str:
        log.append(f"do {name}")
        return name

    async def undo(name: str) -> None:
        log.append(f"undo {name}")

    async def fail(name: str) -> None:
        raise ValueError(name)

    async def branch(ctx: durably.AsyncContext) -> str:
        try:
            async with ctx.saga() as saga:
                await saga.step("x", do, undo, "x")
                await saga.step("y", fail, undo, "y")
        except durably.StepFailed:
            return "branch undone"
        return "branch done"

    @engine.workflow(name="w")
    async def w(ctx: durably.AsyncContext) -> list[Any]:
        return await ctx.gather(branch(ctx), ctx.step("other", do, "other"))

    assert engine.run(w, run_id="r") == ["branch undone", "other"]
    assert "undo x" in log
    positions = {r.name: r.position for r in engine.history("r")}
    assert positions["undo:x"] == "0.0.3"  # in the branch's own scope, after its marker


def test_a_branch_cancelled_by_a_failing_sibling_hands_its_steps_to_the_outer_saga(
    engine: durably.Engine,
) -> None:
    log: list[str] = []

    async def do(name: str) -> str:
        log.append(f"do {name}")
        return name

    async def slow(name: str) -> str:
        await asyncio.sleep(5)  # cancelled when the sibling fails
        log.append(f"do {name}")
        return name

    async def undo(name: str) -> None:
        log.append(f"undo {name}")

    async def fail(name: str) -> None:
        await asyncio.sleep(0.02)  # after the other branch recorded x
        raise ValueError(name)

    async def booking(ctx: durably.AsyncContext) -> None:
        async with ctx.saga() as inner:
            await inner.step("x", do, undo, "x")
            await inner.step("slow", slow, undo, "slow")

    @engine.workflow(name="w")
    async def w(ctx: durably.AsyncContext) -> None:
        async with ctx.saga() as outer:
            await outer.step("first", do, undo, "first")
            await ctx.gather(booking(ctx), ctx.step("pay", fail, "pay"))

    with pytest.raises(durably.WorkflowFailed):
        engine.run(w, run_id="r")
    assert log == ["do first", "do x", "undo x", "undo first"]


def _request_halt(e: durably.Engine, run_id: str, reason: str = "duplicate alert") -> None:
    e._attempts.active[run_id].core.request_halt(
        durably.Cancelled(f"run {run_id!r} was cancelled: {reason}", reason)
    )


def test_a_halt_mid_saga_compensates_despite_the_latch_and_replays(
    any_engine: durably.Engine,
) -> None:
    """A cancel delivered at the next saga step compensates what succeeded (the latch lets
    compensations through, nothing else), and a crash during that compensation resumes it:
    the halt replays at its recorded position, finished compensations replay."""
    world = World()
    kills = {("4", "undo:hotel", "recorded")}

    def hook(run_id: str, pos: str, name: str, window: str) -> None:
        if (pos, name, window) in kills:
            kills.discard((pos, name, window))
            raise Crash("killed during compensation")

    any_engine.fault_hook = hook
    after: list[str] = []

    def hotel(n: int, *, idempotency_key: str) -> dict[str, Any]:
        if not world.log.count("do hotel"):
            _request_halt(any_engine, "r")  # a cancel arrives while the hotel is booked
        return world.do("hotel")(n, idempotency_key=idempotency_key)

    @any_engine.workflow(name="trip")
    def trip(ctx: durably.Context) -> None:
        try:
            with ctx.saga() as saga:
                saga.step("flight", world.do("flight"), world.undo("flight"), 0)
                saga.step("hotel", hotel, world.undo("hotel"), 1)
                saga.step("car", world.do("car"), world.undo("car"), 2)
        except durably.Cancelled:
            try:
                ctx.step("after", lambda: after.append("ran"))
            except durably.Cancelled:
                after.append("latched")  # compensation over: the latch holds again
            raise

    with pytest.raises(Crash):
        any_engine.run(trip, run_id="r")
    assert world.log == ["do flight", "do hotel", "undo hotel"]
    with pytest.raises(durably.Cancelled):
        any_engine.run(trip, run_id="r")  # no new cancel request: the halt record replays
    assert world.log == ["do flight", "do hotel", "undo hotel", "undo flight"]
    assert after == ["latched"]
    assert any_engine.get_run("r").status == "cancelled"
    assert _shape(any_engine, "r") == [
        ("0", STEP, "flight", OK),
        ("1", STEP, "hotel", OK),
        ("2", HALT, "durably.cancel", OK),
        ("3", COMPENSATE, "durably.compensate", OK),
        ("4", STEP, "undo:hotel", OK),
        ("5", STEP, "undo:flight", OK),
    ]


def test_engine_cancel_mid_saga_compensates_and_ends_cancelled(
    any_engine: durably.Engine,
) -> None:
    world = World()

    def hotel(n: int, *, idempotency_key: str) -> dict[str, Any]:
        any_engine.cancel("r", reason="the customer called it off")  # arrives mid-step
        return world.do("hotel")(n, idempotency_key=idempotency_key)

    @any_engine.workflow(name="trip")
    def trip(ctx: durably.Context) -> None:
        with ctx.saga() as saga:
            saga.step("flight", world.do("flight"), world.undo("flight"), 0)
            saga.step("hotel", hotel, world.undo("hotel"), 1)
            saga.step("car", world.do("car"), world.undo("car"), 2)

    with pytest.raises(durably.Cancelled) as cancelled:
        any_engine.run(trip, run_id="r")
    assert cancelled.value.reason == "the customer called it off"
    assert world.log == ["do flight", "do hotel", "undo hotel", "undo flight"]
    assert any_engine.get_run("r").status == "cancelled"
    assert [(p, k) for p, k, _, _ in _shape(any_engine, "r")][2:4] == [
        ("2", HALT),
        ("3", COMPENSATE),
    ]


def test_a_saga_parked_on_a_timer_does_not_compensate_until_cancelled(tmp_path: Path) -> None:
    """Parking unwinds the block with a BaseException: nothing is undone. A cancel wakes
    the run; the replay reaches the timer, the cancel lands there, and the saga undoes
    what it did before it slept."""
    world = World()
    clock = durably.FakeClock()
    with durably.Engine(f"sqlite:///{tmp_path / 'j.db'}", clock=clock, park_wait_s=0) as e:

        @e.workflow(name="trip")
        def trip(ctx: durably.Context) -> None:
            with ctx.saga() as saga:
                saga.step("flight", world.do("flight"), world.undo("flight"), 0)
                ctx.sleep(3600)  # wait for the price to drop
                saga.step("hotel", world.do("hotel"), world.undo("hotel"), 1)

        with pytest.raises(durably.RunParked):
            e.run(trip, run_id="r")
        assert world.log == ["do flight"]
        e.cancel("r", reason="trip called off")
        with pytest.raises(durably.Cancelled, match="trip called off"):
            e.resume("r")
        assert world.log == ["do flight", "undo flight"]
        assert [(p, k) for p, k, _, _ in _shape(e, "r")] == [
            ("0", STEP),
            ("1", HALT),
            ("2", COMPENSATE),
            ("3", STEP),
        ]
        assert e.get_run("r").status == "cancelled"


def test_a_compensation_failing_under_a_cancel_ends_the_run_failed(
    any_engine: durably.Engine,
) -> None:
    """A cancel ends a run ``cancelled`` whatever the workflow does, except when a
    compensation failed for good: what it should have undone may be left in place, so the
    run ends ``failed`` with CompensationFailed for a person to look at."""
    world = World()

    def hotel(n: int, *, idempotency_key: str) -> dict[str, Any]:
        any_engine.cancel("r", reason="called off")
        return world.do("hotel")(n, idempotency_key=idempotency_key)

    @any_engine.workflow(name="trip")
    def trip(ctx: durably.Context) -> None:
        with ctx.saga() as saga:
            saga.step("flight", world.do("flight"), world.fail("flight-refund"), 0)
            saga.step("hotel", hotel, world.undo("hotel"), 1)
            saga.step("car", world.do("car"), world.undo("car"), 2)

    with pytest.raises(durably.WorkflowFailed) as failed:
        any_engine.run(trip, run_id="r")
    assert failed.value.type_name == "durably.errors.CompensationFailed"
    assert "step 5 'undo:flight' failed: ValueError: flight-refund: no seats left" in (
        failed.value.message
    )
    assert "It was compensating for: durably.errors.Cancelled: run 'r' was cancelled" in (
        failed.value.message
    )
    assert world.log == ["do flight", "do hotel", "undo hotel", "do flight-refund"]
    assert any_engine.get_run("r").status == "failed"


def test_while_one_branch_compensates_a_sibling_stays_under_the_latch(
    engine: durably.Engine,
) -> None:
    """The latch exemption belongs to the compensating code only: a sibling gather branch
    that goes live meanwhile gets the halt, it does not slip through."""
    log: list[str] = []

    async def do(name: str) -> str:
        if name == "a1":
            await asyncio.sleep(0.01)  # the sibling records b1 first
        log.append(f"do {name}")
        return name

    async def slow_undo(name: str) -> None:
        _request_halt(engine, "r")
        await asyncio.sleep(0.05)  # the sibling runs meanwhile
        log.append(f"undo {name}")

    async def fail(name: str) -> None:
        raise ValueError(name)

    async def saga_branch(ctx: durably.AsyncContext) -> None:
        async with ctx.saga() as saga:
            await saga.step("a1", do, slow_undo, "a1")
            await saga.step("a2", fail, slow_undo, "a2")

    async def sibling(ctx: durably.AsyncContext) -> None:
        await ctx.step("b1", do, "b1")
        await asyncio.sleep(0.02)  # lands while the other branch compensates
        try:
            await ctx.step("b2", do, "b2")
        except durably.Cancelled:
            log.append("b2 halted")
            raise

    @engine.workflow(name="w")
    async def w(ctx: durably.AsyncContext) -> None:
        await ctx.gather(saga_branch(ctx), sibling(ctx), return_exceptions=True)

    with pytest.raises(durably.DurablyError):
        engine.run(w, run_id="r")
    assert log == ["do b1", "do a1", "b2 halted", "undo a1"]


def test_replay_check_passes_a_compensated_run_and_one_stopped_mid_compensation(
    engine: durably.Engine,
) -> None:
    from durably.replaycheck import check_run

    world = World()
    kills = {("6", "undo:hotel", "recorded")}

    def hook(run_id: str, pos: str, name: str, window: str) -> None:
        if run_id == "mid" and (pos, name, window) in kills:
            kills.discard((pos, name, window))
            raise Crash("killed during compensation")

    engine.fault_hook = hook
    trip = _trip(engine, world)
    with pytest.raises(durably.WorkflowFailed):
        engine.run(trip, run_id="done")
    with pytest.raises(Crash):
        engine.run(trip, run_id="mid")
    calls = len(world.log)
    assert check_run(engine, engine.get_run("done")) is None
    assert check_run(engine, engine.get_run("mid")) is None
    assert len(world.log) == calls  # a check executes nothing


def test_a_changed_compensation_plan_blocks_before_any_compensation_runs(
    engine: durably.Engine,
) -> None:
    """The marker's digest covers the steps it undoes: code that would now compensate
    other steps is caught at the marker, not by undoing the wrong thing."""
    world = World()
    kills = {("5", "undo:car", "before")}

    def hook(run_id: str, pos: str, name: str, window: str) -> None:
        if (pos, name, window) in kills:
            kills.discard((pos, name, window))
            raise Crash("killed before the first compensation")

    engine.fault_hook = hook
    optional = {"car": False}

    @engine.workflow(name="trip")
    def trip(ctx: durably.Context) -> None:
        with ctx.saga() as saga:
            saga.step("flight", world.do("flight"), world.undo("flight"), 0)
            saga.step("hotel", world.do("hotel"), world.undo("hotel"), 1)
            if optional["car"]:  # a deploy made the car a plain step: not compensated
                ctx.step("car", world.do("car"), 2)
            else:
                saga.step("car", world.do("car"), world.undo("car"), 2)
            saga.step("tour", world.fail("tour"), world.undo("tour"), 3)

    with pytest.raises(Crash):
        engine.run(trip, run_id="r")
    # The marker is written with the first compensation's record: kill after it.
    kills.add(("5", "undo:car", "recorded"))
    with pytest.raises(Crash):
        engine.run(trip, run_id="r")
    optional["car"] = True
    with pytest.raises(durably.NonDeterminism, match="a saga compensating the steps at 1, 0"):
        engine.run(trip, run_id="r")
    assert engine.get_run("r").status == BLOCKED
    assert world.log.count("undo hotel") == 0


@pytest.mark.parametrize("with_saga", [False, True])
def test_replay_check_passes_a_cancelled_run(engine: durably.Engine, with_saga: bool) -> None:
    """A cancelled run raises Cancelled at its recorded halt on replay, as it did live
    (and a saga compensates again, replaying): not a divergence."""
    from durably.replaycheck import check_run

    world = World()

    def hotel(n: int, *, idempotency_key: str) -> dict[str, Any]:
        engine.cancel("r", reason="called off")
        return world.do("hotel")(n, idempotency_key=idempotency_key)

    @engine.workflow(name="trip")
    def trip(ctx: durably.Context) -> None:
        if not with_saga:
            ctx.step("hotel", hotel, 1)
            ctx.step("car", world.do("car"), 2)
            return
        with ctx.saga() as saga:
            saga.step("hotel", hotel, world.undo("hotel"), 1)
            saga.step("car", world.do("car"), world.undo("car"), 2)

    with pytest.raises(durably.Cancelled):
        engine.run(trip, run_id="r")
    calls = len(world.log)
    assert check_run(engine, engine.get_run("r")) is None
    assert len(world.log) == calls


def test_a_fork_past_the_undone_steps_is_refused(any_engine: durably.Engine) -> None:
    """Forking after a compensated step would copy its result as done while the world
    has undone it: refused, naming the position to fork at instead."""
    world = World()

    @any_engine.workflow(name="trip")
    def trip(ctx: durably.Context) -> str:
        ctx.step("plan", lambda: "plan")
        with ctx.saga() as saga:
            saga.step("flight", world.do("flight"), world.undo("flight"), 0)
            saga.step("tour", world.fail("tour"), world.undo("tour"), 1)
        return "done"

    with pytest.raises(durably.WorkflowFailed):
        any_engine.run(trip, run_id="r")
    with pytest.raises(durably.ConfigError, match=r"a saga undid the step at 1.*fork at 1"):
        any_engine.fork("r", at=2, new_run_id="r2")
    assert any_engine.store.get_run("r2") is None  # nothing was created
    any_engine.fork("r", at=1, new_run_id="r3")  # the position it names is accepted
