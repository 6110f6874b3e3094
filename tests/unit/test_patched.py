"""Patch markers and ``replay --check`` (issue 13): a deploy that inserts a step
mid-workflow, without and with ``ctx.patched``, on a real SQLite journal."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import durably
from durably.core import SCOPE, RunCore, Scope, _pos_key
from durably.features.versions import _later, patched
from durably.history import PATCHED, StepRecord
from durably.replay.setup import RunSetup
from durably.replaycheck import DIVERGES, check_runs, runs_to_check


class Crash(BaseException):
    """Stands in for a process death inside one process (real deaths: tests/crash)."""


def _stop_before(position: str) -> Callable[[str, str, str, str], None]:
    def hook(run_id: str, pos: str, name: str, window: str) -> None:
        if (pos, window) == (position, "before"):
            raise Crash(pos)

    return hook


class World:
    """Counts tool calls outside the journal."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    def tool(self, name: str) -> Callable[[int], str]:
        def fn(x: int) -> str:
            self.calls[name] += 1
            return f"{name}:{x}"

        fn.__name__ = name
        return fn


def _old_code(engine: durably.Engine, world: World) -> durably.Workflow:
    @engine.workflow(name="deploy")
    def deploy(ctx: durably.Context, x: int) -> list[str]:
        a, c = ctx.step("a", world.tool("a"), x), ctx.step("c", world.tool("c"), x)
        return [a, c, ctx.step("d", world.tool("d"), x)]

    return deploy


def _new_code(engine: durably.Engine, world: World, patch: bool) -> durably.Workflow:
    @engine.workflow(name="deploy")
    def deploy(ctx: durably.Context, x: int) -> list[str]:
        out = [ctx.step("a", world.tool("a"), x)]
        if not patch or ctx.patched("insert-b"):
            out.append(ctx.step("b", world.tool("b"), x))
        out.append(ctx.step("c", world.tool("c"), x))
        out.append(ctx.step("d", world.tool("d"), x))
        return out

    return deploy


def _half_done_runs(url: str, world: World, n: int) -> None:
    """``n`` runs of the old code stopped after steps a and c (past the point where the
    new code inserts b), one stopped before c (not past it), and one finished."""
    with durably.Engine(url, clock=durably.FakeClock()) as old:
        wf = _old_code(old, world)
        old.fault_hook = _stop_before("2")
        for i in range(n):
            with pytest.raises(Crash):
                old.run(wf, i, run_id=f"old-{i}")
        old.fault_hook = _stop_before("1")
        with pytest.raises(Crash):
            old.run(wf, 8, run_id="early")
        old.fault_hook = None
        assert old.run(wf, 9, run_id="old-done") == ["a:9", "c:9", "d:9"]


def _check(engine: durably.Engine) -> dict[str, str | None]:
    report = check_runs(engine, runs_to_check(engine, None, None, None, 1000, finished=True))
    return {f.run.run_id: f.position for f in report.findings if f.kind == DIVERGES}


def test_inserting_a_step_without_a_patch_is_caught_before_and_at_resume(tmp_path: Path) -> None:
    url, world = f"sqlite:///{tmp_path / 'j.db'}", World()
    _half_done_runs(url, world, 3)
    with durably.Engine(url, clock=durably.FakeClock()) as new:
        wf = _new_code(new, world, patch=False)
        before = dict(world.calls)
        # The check names every affected run, with the position, and calls nothing; the
        # run stopped before the insertion point is not affected (b runs live there).
        assert _check(new) == {"old-0": "1", "old-1": "1", "old-2": "1", "old-done": "1"}
        assert world.calls == before
        assert {r.status for r in new.store.list_runs()} == {"running", "completed"}
        with pytest.raises(durably.NonDeterminism, match="step 1"):
            new.run(wf, 0, run_id="old-0")
        assert new.get_run("old-0").status == "blocked"


def test_with_patched_old_runs_keep_the_old_path_and_new_runs_take_the_new(
    tmp_path: Path,
) -> None:
    url, world = f"sqlite:///{tmp_path / 'j.db'}", World()
    _half_done_runs(url, world, 2)
    with durably.Engine(url, clock=durably.FakeClock()) as new:
        wf = _new_code(new, world, patch=True)
        assert _check(new) == {}
        assert new.run(wf, 0, run_id="old-0") == ["a:0", "c:0", "d:0"]
        assert new.resume("old-1") == ["a:1", "c:1", "d:1"]
        assert world.calls["b"] == 0
        # The run stopped before the insertion point records the marker: new path.
        assert new.resume("early") == ["a:8", "b:8", "c:8", "d:8"]
        assert world.calls["b"] == 1
        # A new run records the marker and takes the new path; a resume replays it.
        new.fault_hook = _stop_before("3")
        with pytest.raises(Crash):
            new.run(wf, 5, run_id="fresh")
        new.fault_hook = None
        assert new.run(wf, 5, run_id="fresh") == ["a:5", "b:5", "c:5", "d:5"]
        assert world.calls["b"] == 2
        hist = new.history("fresh")
        assert [(r.position, r.kind, r.name) for r in hist] == [
            ("0", "step", "a"),
            ("1", PATCHED, "insert-b"),
            ("2", "step", "b"),
            ("3", "step", "c"),
            ("4", "step", "d"),
        ]
        assert _check(new) == {}


def test_the_check_stops_where_a_new_patched_marker_would_be_recorded(tmp_path: Path) -> None:
    # A run recorded up to a position where today's code adds a patched marker: the
    # marker is True there and the check of that run stops: nothing diverges.
    url, world = f"sqlite:///{tmp_path / 'j.db'}", World()
    with durably.Engine(url, clock=durably.FakeClock()) as old:
        wf = _old_code(old, world)
        old.fault_hook = _stop_before("1")
        with pytest.raises(Crash):
            old.run(wf, 1, run_id="r")
    with durably.Engine(url, clock=durably.FakeClock()) as new:

        @new.workflow(name="deploy")
        def deploy(ctx: durably.Context, x: int) -> list[str]:
            out = [ctx.step("a", world.tool("a"), x)]
            if ctx.patched("tail"):
                out.append(ctx.step("b", world.tool("b"), x))
            out.append(ctx.step("c", world.tool("c"), x))
            return out

        assert _check(new) == {}
        assert len(new.history("r")) == 1  # the check wrote nothing


def test_deprecate_patch_consumes_markers_and_records_none(tmp_path: Path) -> None:
    url, world = f"sqlite:///{tmp_path / 'j.db'}", World()
    with durably.Engine(url, clock=durably.FakeClock()) as e1:
        wf = _new_code(e1, world, patch=True)
        assert e1.run(wf, 1, run_id="patched") == ["a:1", "b:1", "c:1", "d:1"]
    with durably.Engine(url, clock=durably.FakeClock()) as e2:

        @e2.workflow(name="deploy")
        def deploy(ctx: durably.Context, x: int) -> list[str]:
            a = ctx.step("a", world.tool("a"), x)
            assert ctx.deprecate_patch("insert-b") is None
            b, c = ctx.step("b", world.tool("b"), x), ctx.step("c", world.tool("c"), x)
            return [a, b, c, ctx.step("d", world.tool("d"), x)]

        assert _check(e2) == {}
        assert e2.run(deploy, 2, run_id="new") == ["a:2", "b:2", "c:2", "d:2"]
        assert [r.kind for r in e2.history("new")] == ["step"] * 4


def test_patched_false_consumes_nothing_and_another_id_is_not_this_one(
    tmp_path: Path,
) -> None:
    url, world = f"sqlite:///{tmp_path / 'j.db'}", World()
    with durably.Engine(url, clock=durably.FakeClock()) as e1:
        wf = _new_code(e1, world, patch=True)
        e1.run(wf, 1, run_id="r")
    with durably.Engine(url, clock=durably.FakeClock()) as e2:
        seen: list[bool] = []

        @e2.workflow(name="deploy")
        def deploy(ctx: durably.Context, x: int) -> list[str]:
            out = [ctx.step("a", world.tool("a"), x)]
            seen.append(ctx.patched("other-change"))  # a marker of another id is there
            return out

        assert _check(e2) == {"r": "1"}  # the marker at 1 is never asked for
        assert seen == [False]


def test_patch_ids_are_checked(tmp_path: Path) -> None:
    with durably.Engine(f"sqlite:///{tmp_path / 'j.db'}", clock=durably.FakeClock()) as e:

        @e.workflow()
        def bad(ctx: durably.Context) -> bool:
            return ctx.patched("")

        with pytest.raises(durably.ConfigError, match="change id"):
            e.run(bad)


@pytest.mark.parametrize(
    ("recorded", "at", "later"),
    [
        ("3", "2", True),  # a later position of this scope
        ("2.0.0", "2", True),  # nested under p itself
        ("1", "2", False),  # earlier
        ("4.1.3", "4.1.2", True),  # same branch, later
        ("4.0.5", "4.1.2", False),  # a sibling branch does not count
        ("4", "4.1.2", False),  # the enclosing gather's own marker
        ("5", "4.1.2", True),  # a later position of the enclosing scope
        ("3.0.9", "4.1.2", False),  # an earlier gather of the enclosing scope
        ("4.1.2.0.0", "4.1.2", True),
    ],
)
def test_what_counts_as_recorded_later(recorded: str, at: str, later: bool) -> None:
    assert _later(_pos_key(recorded), _pos_key(at)) is later


def _step(pos: str, name: str = "s") -> StepRecord:
    return StepRecord(pos, "step", name, "0" * 64, "ok", "null")


@pytest.mark.parametrize(
    ("history", "expected"),
    [
        (["0.1.0", "0.1.1"], True),  # only a sibling branch has records: new path
        (["0.1.0", "1"], False),  # a later position of the enclosing scope: old run
        (["0.0.0"], False),  # this branch recorded a step here: old run
    ],
)
def test_patched_in_a_gather_branch(history: list[str], expected: bool) -> None:
    core = RunCore(RunSetup("r", [_step(p) for p in history], durably.FakeClock()))
    token = SCOPE.set(Scope(core, "0.0."))
    try:
        assert patched(core, "x") is expected
        assert [r.position for r in core.pending] == (["0.0.0"] if expected else [])
        assert core.scope().peek() == ("0.0.1" if expected else "0.0.0")
    finally:
        SCOPE.reset(token)


def test_async_workflows_await_patched_and_replay_it(tmp_path: Path) -> None:
    url, world = f"sqlite:///{tmp_path / 'j.db'}", World()
    with durably.Engine(url, clock=durably.FakeClock()) as e:

        @e.workflow(name="g")
        async def g(ctx: durably.AsyncContext) -> list[Any]:
            took = await ctx.patched("p")
            await ctx.deprecate_patch("unrelated")  # no marker of it here: a no-op
            return [took, await ctx.step("s", world.tool("s"), 1)]

        e.fault_hook = _stop_before("1")
        with pytest.raises(Crash):
            e.run(g, run_id="r")
        e.fault_hook = None
        assert e.run(g, run_id="r") == [True, "s:1"]
        assert [(r.kind, r.name) for r in e.history("r")] == [(PATCHED, "p"), ("step", "s")]
        assert _check(e) == {}


def test_the_check_stops_where_a_new_gather_marker_would_be_recorded(tmp_path: Path) -> None:
    # A run recorded up to a position where the code starts a gather: the gather would
    # record its marker there (go live), so the check of that run ends before any branch
    # runs, even a branch that records nothing itself.
    url, world = f"sqlite:///{tmp_path / 'j.db'}", World()
    with durably.Engine(url, clock=durably.FakeClock()) as old:

        @old.workflow(name="g")
        async def g_old(ctx: durably.AsyncContext) -> list[Any]:
            return [
                await ctx.step("a", world.tool("a"), 1),
                await ctx.step("z", world.tool("z"), 2),
            ]

        old.fault_hook = _stop_before("1")
        with pytest.raises(Crash):
            old.run(g_old, run_id="r")
    with durably.Engine(url, clock=durably.FakeClock()) as new:

        async def helper() -> int:
            world.calls["helper"] += 1
            return 0

        @new.workflow(name="g")
        async def g(ctx: durably.AsyncContext) -> list[Any]:
            a = await ctx.step("a", world.tool("a"), 1)
            return [a, *await ctx.gather(helper(), ctx.step("b", world.tool("b"), 2))]

        assert _check(new) == {}
        assert world.calls == Counter({"a": 1})  # no branch ran, no step went live
        assert len(new.history("r")) == 1  # the check wrote nothing


@pytest.mark.parametrize("then_raise", [True, False])
def test_the_check_ends_where_history_ends_even_if_the_workflow_swallows_it(
    tmp_path: Path, then_raise: bool
) -> None:
    """A run stopped inside ``gather(..., return_exceptions=True)``: the branch that
    reaches the end of history ends the check, and the sibling branch's recorded steps it
    then never replays are not "unused" (the check said this run diverges; it resumes
    fine)."""
    url, world = f"sqlite:///{tmp_path / 'j.db'}", World()
    recording = [True]  # the first attempt: branch a waits for b, a death stops it
    with durably.Engine(url, clock=durably.FakeClock()) as e:

        @e.workflow(name="g")
        async def g(ctx: durably.AsyncContext) -> list[str]:
            import asyncio

            b_done = asyncio.Event()

            async def a() -> str:
                first = await ctx.step("a1", world.tool("a1"), 1)
                if recording[0]:
                    await b_done.wait()
                return first + await ctx.step("a2", world.tool("a2"), 1)

            async def b() -> str:
                first = await ctx.step("b1", world.tool("b1"), 1)
                first += await ctx.step("b2", world.tool("b2"), 1)
                b_done.set()
                return first

            done = await ctx.gather(a(), b(), return_exceptions=not recording[0])
            failed = [type(x).__name__ for x in done if isinstance(x, BaseException)]
            if failed and then_raise:  # what swallowing code might do with a stop it caught
                raise RuntimeError(f"branches failed: {failed}")
            return [str(x) for x in done]

        # A process death inside branch a after branch b finished: history ends at 0.0.1.
        e.fault_hook = _stop_before("0.0.1")
        with pytest.raises(Crash):
            e.run(g, run_id="r")
        e.fault_hook, recording[0] = None, False
        # (position 0 is the gather's own record)
        assert sorted(r.position for r in e.history("r")) == ["0", "0.0.0", "0.1.0", "0.1.1"]
        before = dict(world.calls)
        assert _check(e) == {}
        assert world.calls == before  # and it called no tool
        assert e.run(g, run_id="r") == ["a1:1a2:1", "b1:1b2:1"]
