"""``engine.cancel``: a durable flag seen at the next step boundary (the append reports
it) or at the claim, delivered as ``durably.Cancelled`` at the next live position, latched,
and concluded as a ``cancelled`` run whatever the workflow does. On the fake clock; the
cancel comes from a second engine on the same journal (another process's view: it has no
shortcut into the driving engine's core)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

import durably
from durably import codec
from durably.events import RUN_CANCEL_REQUESTED, RUN_CANCELLED
from durably.history import CANCEL_REASON_CHARS_MAX, HALT, StepRecord
from durably.store.base import Owner
from durably.store.runs import CANCEL_ERROR_TYPE
from durably.worker import Worker


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'j.db'}"


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


def kinds(e: durably.Engine, run_id: str) -> list[str]:
    return [ev.kind for ev in e.events(run_id).events]


def test_the_next_step_never_runs_and_the_run_ends_cancelled(
    engine: durably.Engine, other: durably.Engine
) -> None:
    ran: list[str] = []

    def a() -> str:
        ran.append("a")
        other.cancel("r", reason="duplicate alert")  # while step a runs
        return "a"

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> str:
        ctx.step("a", a)
        ctx.step("b", lambda: ran.append("b"))
        return "done"

    with pytest.raises(durably.Cancelled) as info:
        engine.run(w, run_id="r")
    assert info.value.reason == "duplicate alert"
    assert "duplicate alert" in str(info.value)
    assert ran == ["a"]
    run = engine.get_run("r")
    assert run.status == "cancelled" and run.error_type == CANCEL_ERROR_TYPE
    assert run.error_message == "duplicate alert" and run.owner is None
    assert [(r.position, r.kind) for r in engine.history("r")] == [("0", "step"), ("1", HALT)]
    assert kinds(engine, "r")[-1] == RUN_CANCELLED
    assert RUN_CANCEL_REQUESTED in kinds(engine, "r")
    # Its outcome stands: running it again raises the same, and runs nothing.
    with pytest.raises(durably.Cancelled, match="duplicate alert"):
        engine.run(w, run_id="r")
    assert other.cancel("r", reason="again") == run  # cancelled already: unchanged
    assert ran == ["a"]


def test_catching_cancelled_cannot_continue_live_work(
    engine: durably.Engine, other: durably.Engine
) -> None:
    ran: list[str] = []
    seen: list[str] = []

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> str:
        ctx.step("a", lambda: other.cancel("r", reason="stop") and "a")
        try:
            ctx.step("b", lambda: ran.append("b"))
        except durably.Cancelled as exc:
            seen.append(f"caught: {exc.reason}")
            ctx.emit("cleanup", {"undoing": "a"})  # cleanup may still say what it does
            try:
                ctx.step("c", lambda: ran.append("c"))
            except durably.Cancelled:
                seen.append("stopped again")
            try:
                ctx.now()
            except durably.Cancelled:
                seen.append("and again")
        return "pretends it finished"

    with pytest.raises(durably.Cancelled, match="stop"):
        engine.run(w, run_id="r")
    assert ran == [] and seen == ["caught: stop", "stopped again", "and again"]
    run = engine.get_run("r")
    assert run.status == "cancelled" and run.outcome is None
    assert "user" in kinds(engine, "r")


def test_a_workflow_raising_something_else_still_ends_cancelled(
    engine: durably.Engine, other: durably.Engine
) -> None:
    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> None:
        ctx.step("a", lambda: other.cancel("r") and 1)
        try:
            ctx.step("b", lambda: 2)
        except durably.Cancelled:
            raise ValueError("cleanup failed") from None

    with pytest.raises(durably.Cancelled, match="no reason given") as info:
        engine.run(w, run_id="r")
    assert info.value.reason is None
    run = engine.get_run("r")
    assert run.status == "cancelled" and run.error_message is None


def test_an_async_workflow_is_cancelled_too(engine: durably.Engine, other: durably.Engine) -> None:
    ran: list[str] = []

    @engine.workflow(name="w")
    async def w(ctx: durably.AsyncContext) -> str:
        await ctx.step("a", lambda: other.cancel("r", reason="async stop") and "a")
        await ctx.step("b", lambda: ran.append("b"))
        return "done"

    with pytest.raises(durably.Cancelled, match="async stop"):
        engine.run(w, run_id="r")
    assert ran == [] and engine.get_run("r").status == "cancelled"


def test_cancel_in_this_process_needs_no_append_to_be_seen(engine: durably.Engine) -> None:
    """The driving engine's own cancel reaches its core at once: a workflow doing local
    work between steps stops at its very next recording call."""
    ran: list[str] = []

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> str:
        engine.cancel("r", reason="mine")  # before any append
        ctx.step("a", lambda: ran.append("a"))
        return "done"

    with pytest.raises(durably.Cancelled, match="mine"):
        engine.run(w, run_id="r")
    assert ran == []
    assert [r.kind for r in engine.history("r")] == [HALT]


def test_a_cancel_after_the_last_live_call_lets_the_run_complete(
    engine: durably.Engine, other: durably.Engine
) -> None:
    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> str:
        ctx.step("a", lambda: 1)
        other.cancel("r", reason="too late")  # no recording call after it
        return "done"

    assert engine.run(w, run_id="r") == "done"
    run = engine.get_run("r")
    assert run.status == "completed" and run.cancel_reason == "too late"


def test_a_queued_run_ends_at_once(engine: durably.Engine, other: durably.Engine) -> None:
    ran: list[str] = []

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> str:
        ctx.step("a", lambda: ran.append("a"))
        return "done"

    handle = engine.start(w, run_id="r")
    run = other.cancel("r", reason="not needed")
    assert run.status == "cancelled" and run.error_message == "not needed"
    with pytest.raises(durably.Cancelled, match="not needed") as info:
        handle.result(timeout_s=1)
    assert info.value.reason == "not needed"
    with pytest.raises(durably.Cancelled):
        engine.run(w, run_id="r")
    assert ran == [] and engine.history("r") == []
    assert other.cancel("r", reason="again") == run  # idempotent


def test_a_claimed_run_with_the_flag_replays_then_unwinds(
    engine: durably.Engine, other: durably.Engine, clock: durably.FakeClock
) -> None:
    """A cancel of a run whose driver died: the next claim sees the flag on the row;
    recorded steps replay (nothing runs twice) and the first live position raises."""
    ran: list[str] = []

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> str:
        for name in ("a", "b", "c"):
            ctx.step(name, lambda name=name: ran.append(name) or name)
        return "done"

    engine.start(w, run_id="r")
    store = engine.store
    held = store.claim("r", Owner("gone", 1, "0", ""), 5, 10, lambda _: False)
    digest = codec.digest("a", [], {})
    store.append("r", held.fencing_token, [StepRecord("0", "step", "a", digest, "ok", '"a"')])
    other.cancel("r", reason="stuck worker")
    assert engine.get_run("r").status == "running"  # a flag, not a status
    clock.advance(6)  # the dead driver's lease runs out
    with pytest.raises(durably.Cancelled, match="stuck worker"):
        engine.resume("r")
    assert ran == []
    assert [(r.position, r.kind) for r in engine.history("r")] == [("0", "step"), ("1", HALT)]


def test_a_worker_counts_and_logs_a_cancelled_run(
    engine: durably.Engine, other: durably.Engine, caplog: pytest.LogCaptureFixture
) -> None:
    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> str:
        ctx.step("a", lambda: other.cancel("r", reason="by ops") and "a")
        ctx.step("b", lambda: "b")
        return "done"

    engine.start(w, run_id="r")
    worker = Worker(engine, concurrency=1, poll_interval_s=0.01)
    with caplog.at_level(logging.INFO, logger="durably"):
        stats = worker.run(max_runs=1)
    assert stats.cancelled == 1 and stats.failed == 0 and stats.completed == 0
    assert "run r cancelled: by ops" in caplog.text
    assert engine.get_run("r").status == "cancelled"


def test_finished_runs_raise_run_finished(engine: durably.Engine) -> None:
    @engine.workflow(name="w")
    def w(ctx: durably.Context, fail: bool) -> int:
        if fail:
            raise ValueError("no")
        return 1

    engine.run(w, False, run_id="ok")
    with pytest.raises(durably.WorkflowFailed):
        engine.run(w, True, run_id="bad")
    for run_id, status in (("ok", "completed"), ("bad", "failed")):
        with pytest.raises(durably.RunFinished, match=f"already finished \\({status}\\)"):
            engine.cancel(run_id, reason="too late")
        assert engine.get_run(run_id).cancel_requested_at is None


def test_not_found_and_bad_reasons(engine: durably.Engine) -> None:
    with pytest.raises(durably.RunNotFound, match="nope"):
        engine.cancel("nope")
    with pytest.raises(durably.ConfigError, match="reason must be a str"):
        engine.cancel("nope", reason=42)  # type: ignore[arg-type]

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> int:
        return 1

    engine.start(w, run_id="r")
    run = engine.cancel("r", reason="x" * (CANCEL_REASON_CHARS_MAX + 50) + "\x00")
    assert run.cancel_reason == "x" * CANCEL_REASON_CHARS_MAX  # bounded, storable


def test_blocked_runs_end_at_once_without_cleanup(engine: durably.Engine) -> None:
    names = ["a"]
    cleanup: list[str] = []

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> None:
        try:
            ctx.step(names[0], lambda: 1)
            if names[0] == "a":
                raise KeyboardInterrupt  # the first process stops here (given back)
        except durably.Cancelled:
            cleanup.append("ran")
            raise

    with pytest.raises(KeyboardInterrupt):
        engine.run(w, run_id="r")
    names[0] = "renamed"  # the code no longer matches the history
    with pytest.raises(durably.NonDeterminism):
        engine.resume("r")
    assert engine.get_run("r").status == "blocked"
    run = engine.cancel("r", reason="abandon")
    assert run.status == "cancelled" and run.error_message == "abandon"
    assert "cleanup" in (run.park_reason or "") and cleanup == []


def test_cancel_while_parked_wakes_and_unwinds_at_the_timer(
    url: str, clock: durably.FakeClock, other: durably.Engine
) -> None:
    ran: list[str] = []
    with durably.Engine(url, clock=clock, park_wait_s=0) as e:

        @e.workflow(name="w")
        def w(ctx: durably.Context) -> str:
            ctx.step("a", lambda: ran.append("a") or "a")
            ctx.sleep(3600)
            return str(ctx.step("b", lambda: ran.append("b") or "b"))

        with pytest.raises(durably.RunParked):
            e.run(w, run_id="r")
        clock.advance(10)
        run = other.cancel("r", reason="stop waiting")
        # Due now: from when it parked, so a canceller's clock ahead delays nothing.
        assert run.status == "parked" and run.wake_at == clock.time() - 10
        with pytest.raises(durably.Cancelled, match="stop waiting"):
            e.resume("r")
    assert ran == ["a"]
    hist = other.history("r")
    # The halt took the timer's position whole (its wait was in progress).
    assert [(r.position, r.kind, r.status) for r in hist] == [
        ("0", "step", "ok"),
        ("1", HALT, "ok"),
    ]
    assert other.get_run("r").status == "cancelled"


def test_a_cancel_seen_before_a_timer_stops_it_without_parking(
    engine: durably.Engine, other: durably.Engine
) -> None:
    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> str:
        ctx.step("a", lambda: other.cancel("r", reason="no wait") and "a")
        ctx.sleep(3600)
        return "done"

    with pytest.raises(durably.Cancelled, match="no wait"):
        engine.run(w, run_id="r")
    assert "run.parked" not in kinds(engine, "r")
    assert [r.kind for r in engine.history("r")] == ["step", HALT]


def test_a_cancel_racing_a_park_wakes_the_run_at_once(
    engine: durably.Engine, url: str, clock: durably.FakeClock
) -> None:
    """The cancel lands after the run's last append but before its park: the park finds
    the flag and sets the wake time to now, so engine.run replays and unwinds at once."""
    with durably.Engine(url, clock=clock) as canceller:

        @engine.workflow(name="w")
        def w(ctx: durably.Context) -> str:
            ctx.step("a", lambda: "a")
            canceller.cancel("r", reason="raced")  # no append follows before the park
            ctx.sleep(3600)
            return "done"

        before = clock.time()
        with pytest.raises(durably.Cancelled, match="raced"):
            engine.run(w, run_id="r")
    assert clock.time() - before < 3600  # it never waited out the hour
    assert [r.kind for r in engine.history("r")] == ["step", HALT]


def test_runs_show_says_a_cancel_is_requested_then_its_reason(
    engine: durably.Engine, url: str
) -> None:
    from click.testing import CliRunner

    from durably.cli import main as cli

    def show(run_id: str) -> str:
        res = CliRunner().invoke(cli, ["runs", "show", run_id, "--db", url])
        assert res.exit_code == 0, res.output
        return " ".join(res.output.split())

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> int:
        return 1

    engine.start(w, run_id="r")
    engine.store.claim("r", Owner("elsewhere", 1, "0", ""), 300, 10, lambda _: False)
    said = CliRunner().invoke(cli, ["cancel", "r", "--db", url, "--reason", "[bold]dup[/]\x1b"])
    assert said.exit_code == 0, said.output
    assert "will be cancelled" in said.output and "\x1b" not in said.output
    text = show("r")
    assert "status=running" in text
    assert "cancel requested at " in text
    assert "[bold]dup[/]\\x1b; unwinding at its next step" in text
    engine.start(w, run_id="q")
    CliRunner().invoke(cli, ["cancel", "q", "--db", url, "--reason", "not needed"])
    text = show("q")
    assert "status=cancelled" in text and "cancelled: not needed" in text
    assert "cancel requested" not in text
    assert "why: cancelled while queued" in text


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_flaky_append_still_reports_the_cancel(
    engine: durably.Engine, other: durably.Engine, when: str
) -> None:
    """The append that follows the cancel fails once (before writing, or after: written but
    reported failed, as when a commit's reply is lost); its retry reports the flag all the
    same, so the run still unwinds at its next step."""
    from tests.store_faults import FlakyStore

    engine.store = flaky = FlakyStore(engine.store)  # type: ignore[assignment]
    ran: list[str] = []

    def a() -> str:
        other.cancel("r", reason="flaky")
        flaky.fail("append", 1, "busy", after=when == "after")
        return "a"

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> str:
        ctx.step("a", a)
        ctx.step("b", lambda: ran.append("b"))
        return "done"

    with pytest.raises(durably.Cancelled, match="flaky"):
        engine.run(w, run_id="r")
    assert ran == [] and flaky.injected["append:busy"] == 1
    assert [r.kind for r in engine.history("r")] == ["step", HALT]


def test_cancel_while_waiting_for_a_signal_wakes_and_unwinds(
    url: str, clock: durably.FakeClock, other: durably.Engine
) -> None:
    ran: list[str] = []
    with durably.Engine(url, clock=clock, park_wait_s=0) as e:

        @e.workflow(name="w")
        def w(ctx: durably.Context) -> str:
            ctx.step("a", lambda: ran.append("a") or "a")
            got = ctx.wait_for_signal("approve")  # no timeout: only a signal wakes it
            return str(ctx.step("b", lambda: ran.append(f"b {got}") or "b"))

        with pytest.raises(durably.RunParked):
            e.run(w, run_id="r")
        run = other.cancel("r", reason="nobody will approve")
        assert run.status == "parked" and run.wake_at == clock.time()
        with pytest.raises(durably.Cancelled, match="nobody will approve"):
            e.resume("r")
        # A signal sent now is refused: the run is finished.
        with pytest.raises(durably.RunFinished):
            other.signal("r", "approve", {"by": "ana"})
    assert ran == ["a"]
    assert [(r.position, r.kind) for r in other.history("r")] == [("0", "step"), ("1", HALT)]
