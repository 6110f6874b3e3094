"""The core's halt: a run-wide stop (cancel, budget) that reaches the workflow as an
ordinary exception at its next position that would go live, is recorded there, latches,
and replays at the same place. ``engine.cancel`` and budgets build on it; here it is
requested from inside a step through the engine's active attempt."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import durably
from durably.history import HALT


def _request(e: durably.Engine, run_id: str, reason: str = "stop please") -> None:
    e._attempts.active[run_id].core.request_halt(
        durably.Cancelled(f"run {run_id!r} was cancelled: {reason}", reason)
    )


def _engine(tmp_path: Path) -> durably.Engine:
    return durably.Engine(f"sqlite:///{tmp_path / 'j.db'}", clock=durably.FakeClock())


def test_a_halt_lands_at_the_next_live_position_and_latches(tmp_path: Path) -> None:
    ran: list[str] = []
    seen: list[str] = []
    with _engine(tmp_path) as e:

        def a() -> str:
            ran.append("a")
            _request(e, "r")  # arrives while step a runs: a still completes
            return "a"

        def other(name: str) -> str:
            ran.append(name)
            return name

        @e.workflow(name="w")
        def w(ctx: durably.Context) -> Any:
            ctx.step("a", a)
            try:
                ctx.step("b", other, "b")
            except durably.Cancelled as exc:
                seen.append(f"cancelled: {exc.reason}")
                ctx.emit("cleanup", {"ok": True})  # a cleanup may still say what it does
                try:
                    ctx.step("c", other, "c")
                except durably.Cancelled:
                    seen.append("latched")
                try:
                    ctx.now()
                except durably.Cancelled:
                    seen.append("latched now")
            return "done"

        with pytest.raises(durably.DurablyError):
            e.run(w, run_id="r")
        assert ran == ["a"]  # neither b nor c ran
        assert seen == ["cancelled: stop please", "latched", "latched now"]
        hist = e.history("r")
        assert [(r.position, r.kind, r.name) for r in hist] == [
            ("0", "step", "a"),
            ("1", HALT, "durably.cancel"),
        ]


def test_a_recorded_halt_replays_at_the_same_place(tmp_path: Path) -> None:
    ran: list[str] = []
    paths: list[str] = []
    with _engine(tmp_path) as e:
        first = [True]

        def a() -> str:
            ran.append("a")
            if first[0]:
                _request(e, "r", "dup")
            first[0] = False
            return "a"

        def undo() -> str:
            ran.append("undo")
            return "undone"

        @e.workflow(name="w")
        def w(ctx: durably.Context) -> Any:
            ctx.step("a", a)
            try:
                ctx.step("b", lambda: ran.append("b"))
            except durably.Cancelled as exc:
                paths.append(f"unwound at b: {exc.reason}")
                # A saga's compensation records despite the latch (tests/unit/test_saga.py
                # drives it through ctx.saga()).
                with ctx._core.compensation():
                    ctx.step("undo:a", undo)
                raise
            return "done"

        with pytest.raises(durably.DurablyError):
            e.run(w, run_id="r")
        assert ran == ["a", "undo"]
        assert e.get_run("r").status == "cancelled"
        # Queued again below the engine's rules (a cancelled run is never retried), only
        # to replay it: a and undo:a are recorded, the halt is raised again at b.
        e.store.requeue("r", ("cancelled",))
        with pytest.raises(durably.Cancelled):
            e.run(w, run_id="r")
        assert ran == ["a", "undo"]  # nothing ran twice
        assert paths == ["unwound at b: dup", "unwound at b: dup"]
        assert [(r.position, r.kind) for r in e.history("r")] == [
            ("0", "step"),
            ("1", HALT),
            ("2", "step"),
        ]


def test_a_halt_reaches_a_patched_marker_and_replays_there(tmp_path: Path) -> None:
    with _engine(tmp_path) as e:
        calls: list[str] = []

        def a() -> str:
            calls.append("a")
            if len(calls) == 1:
                _request(e, "r")
            return "a"

        @e.workflow(name="w")
        def w(ctx: durably.Context) -> Any:
            ctx.step("a", a)
            try:
                if ctx.patched("new-path"):
                    calls.append("new path")
            except durably.Cancelled:
                calls.append("cancelled")
                raise
            return "done"

        for _ in range(2):
            with pytest.raises(durably.DurablyError):
                e.run(w, run_id="r")
            assert e.get_run("r").status == "cancelled"
            e.store.requeue("r", ("cancelled",))  # only to replay it (see above)
        assert calls == ["a", "cancelled", "cancelled"]
        assert [(r.position, r.kind) for r in e.history("r")] == [("0", "step"), ("1", HALT)]


def test_a_halt_never_lands_on_replayed_positions(tmp_path: Path) -> None:
    """Requested at the claim of a run whose steps are recorded: they replay, and the
    halt lands at the first position that would go live."""
    with _engine(tmp_path) as e:
        ran: list[str] = []

        @e.workflow(name="w")
        def w(ctx: durably.Context, stop_at: int) -> Any:
            out = []
            for i in range(4):
                if i == stop_at:
                    _request(e, "r")
                out.append(ctx.step(f"s{i}", lambda i=i: ran.append(f"s{i}") or i))
            return out

        assert e.run(w, 99, run_id="r") == [0, 1, 2, 3]
    # A new run whose first two positions are recorded by the same code path.
    with _engine(tmp_path) as e:
        ran.clear()

        @e.workflow(name="w")
        def w2(ctx: durably.Context) -> Any:
            ctx.step("s0", lambda: ran.append("s0") or 0)
            _request(e, "r2")
            for i in (1, 2):
                ctx.step(f"s{i}", lambda i=i: ran.append(f"s{i}") or i)
            return "done"

        with pytest.raises(durably.DurablyError):
            e.run(w2, run_id="r2")
        assert ran == ["s0"]
        assert [r.kind for r in e.history("r2")] == ["step", HALT]
