"""Signals: engine.signal and ctx.wait_for_signal on a real SQLite journal, fake clock."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import durably
from durably.events import SIGNAL_RECEIVED
from durably.history import BLOCKED, OK, SIGNAL, SIGNAL_DATA_BYTES_MAX


@pytest.fixture
def clock() -> durably.FakeClock:
    return durably.FakeClock()


@pytest.fixture
def engine(tmp_path: Path, clock: durably.FakeClock) -> Iterator[durably.Engine]:
    e = durably.Engine(f"sqlite:///{tmp_path / 'j.db'}", clock=clock)
    yield e
    e.close()


class Spy:
    """Counts store calls that consume signals (replay must make none)."""

    def __init__(self, engine: durably.Engine) -> None:
        self.takes: list[tuple[str, str]] = []
        real = engine.store.take_signal

        def take(run_id: str, token: int, name: str, consumer: str) -> Any:
            self.takes.append((name, consumer))
            return real(run_id, token, name, consumer)

        engine.store.take_signal = take  # type: ignore[method-assign]


# -- engine.signal -------------------------------------------------------------------------


def test_signal_returns_per_run_sequence_numbers(engine: durably.Engine) -> None:
    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> None:
        return None

    engine.start(wf, run_id="a")
    engine.start(wf, run_id="b")
    assert engine.signal("a", "approve", {"by": "ana"}) == 1
    assert engine.signal("a", "approve") == 2
    assert engine.signal("b", "other", [1, 2]) == 1
    kinds = [(e.kind, e.data) for e in engine.events("a").events if e.kind == SIGNAL_RECEIVED]
    assert kinds == [(SIGNAL_RECEIVED, {"name": "approve", "seq": 1})] * 1 + [
        (SIGNAL_RECEIVED, {"name": "approve", "seq": 2})
    ]


def test_signal_to_unknown_or_finished_run_raises(engine: durably.Engine) -> None:
    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> str:
        return "done"

    with pytest.raises(durably.RunNotFound, match="durably runs list"):
        engine.signal("missing", "approve")
    engine.run(wf, run_id="r")
    with pytest.raises(durably.RunFinished, match=r"already completed.*nothing was sent"):
        engine.signal("r", "approve")


def test_signal_checks_its_name_and_data(engine: durably.Engine) -> None:
    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> None:
        return None

    engine.start(wf, run_id="r")
    with pytest.raises(durably.ConfigError, match="non-empty str"):
        engine.signal("r", "")
    with pytest.raises(durably.ConfigError, match="NAME_BYTES_MAX"):
        engine.signal("r", "x" * 300)
    with pytest.raises(durably.SerializationError, match="Nothing was sent"):
        engine.signal("r", "big", "x" * SIGNAL_DATA_BYTES_MAX)
    with pytest.raises(durably.SerializationError, match="Nothing was sent"):
        engine.signal("r", "obj", object())
    assert engine.signal("r", "ok", "x" * (SIGNAL_DATA_BYTES_MAX - 2)) == 1  # "..." fits


# -- ctx.wait_for_signal -------------------------------------------------------------------


def test_signal_sent_before_the_wait_is_consumed_once(engine: durably.Engine) -> None:
    spy = Spy(engine)

    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> list[Any]:
        first = ctx.wait_for_signal("go", timeout_s=0, default="none")
        second = ctx.wait_for_signal("go", timeout_s=0, default="none")
        return [first, second]

    engine.start(wf, run_id="r")
    engine.signal("r", "go", {"n": 1})
    assert engine.resume("r") == [{"n": 1}, "none"]
    recs = engine.history("r")
    assert [(r.kind, r.name, r.status) for r in recs] == [
        (SIGNAL, "wait_for_signal:go", OK),
        (SIGNAL, "wait_for_signal:go", OK),
    ]
    assert [r.output for r in recs] == ['{"data":{"n":1},"seq":1}', '{"timeout":true}']
    assert spy.takes == [("go", "0"), ("go", "1")]


def test_two_signals_of_one_name_are_consumed_in_order(engine: durably.Engine) -> None:
    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> list[Any]:
        return [ctx.wait_for_signal("go", timeout_s=0) for _ in range(3)]

    engine.start(wf, run_id="r")
    engine.signal("r", "go", "first")
    engine.signal("r", "other", "not this one")
    engine.signal("r", "go", "second")
    assert engine.resume("r") == ["first", "second", None]


def test_replay_returns_the_recorded_signal_without_io(engine: durably.Engine) -> None:
    crash = {"on": True}

    def after() -> int:
        if crash["on"]:
            raise _Crash  # the process dies after the wait was recorded
        return 1

    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> Any:
        got = ctx.wait_for_signal("go", timeout_s=0, default="late")
        ctx.step("after", after)
        return got

    engine.start(wf, run_id="r")
    engine.signal("r", "go", "payload")
    engine.signal("r", "go", "spare")
    with pytest.raises(_Crash):
        engine.resume("r")
    spy = Spy(engine)
    crash["on"] = False
    assert engine.resume("r") == "payload"  # replayed: not "spare", and no store call
    assert spy.takes == []


def test_timeout_zero_returns_default_and_records_the_timeout(engine: durably.Engine) -> None:
    marker = object()

    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> bool:
        return ctx.wait_for_signal("go", timeout_s=0, default=marker) is marker

    assert engine.run(wf, run_id="r") is True
    assert engine.history("r")[0].output == '{"timeout":true}'


def test_a_changed_signal_name_is_non_determinism_naming_both(engine: durably.Engine) -> None:
    name = {"v": "approve"}

    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> Any:
        got = ctx.wait_for_signal(name["v"], timeout_s=0)
        ctx.step("boom", _crash)
        return got

    engine.start(wf, run_id="r")
    with pytest.raises(_Crash):
        engine.resume("r")
    name["v"] = "reject"
    with pytest.raises(durably.NonDeterminism) as err:
        engine.resume("r")
    assert "'wait_for_signal:approve'" in str(err.value)
    assert "'wait_for_signal:reject'" in str(err.value)
    assert engine.get_run("r").status == BLOCKED


class _Crash(BaseException):
    pass


def _crash() -> None:
    raise _Crash


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (("",), "non-empty str"),
        (("go", -1), "timeout_s must be None"),
        (("go", float("nan")), "timeout_s must be None"),
        (("go", "10"), "timeout_s must be None"),
    ],
)
def test_bad_arguments_block_the_run(
    engine: durably.Engine, args: tuple[Any, ...], match: str
) -> None:
    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> Any:
        try:
            ctx.wait_for_signal(*args)
        except durably.ConfigError:
            pass  # caught: the run is blocked all the same
        return "went on"

    with pytest.raises(durably.ConfigError, match=match):
        engine.run(wf, run_id="r")
    assert engine.get_run("r").status == BLOCKED


def test_async_wait_for_signal(engine: durably.Engine) -> None:
    @engine.workflow(name="awf")
    async def awf(ctx: durably.AsyncContext) -> list[Any]:
        a = await ctx.wait_for_signal("go", timeout_s=0)
        b = await asyncio.wait_for(ctx.wait_for_signal("go", timeout_s=0, default="d"), 5)
        return [a, b]

    engine.start(awf, run_id="r")
    engine.signal("r", "go", 7)
    assert engine.resume("r") == [7, "d"]


def test_async_wait_for_signal_without_await_blocks_the_run(engine: durably.Engine) -> None:
    @engine.workflow(name="awf")
    async def awf(ctx: durably.AsyncContext) -> Any:
        got = ctx.wait_for_signal("go", timeout_s=0)
        return bool(got)

    with pytest.raises(durably.ConfigError, match=r"ctx\.wait_for_signal\('go'\) was used"):
        engine.run(awf, run_id="r")
    assert engine.get_run("r").status == BLOCKED


def test_a_crash_between_taking_and_recording_takes_the_same_signal_again(
    tmp_path: Path, clock: durably.FakeClock
) -> None:
    """The wait's record rides with the next write; a process death before it leaves the
    signal consumed by the wait's position, which hands it out again (never the next)."""
    armed = {"on": True}

    def hook(run_id: str, pos: str, name: str, window: str) -> None:
        if armed["on"] and (pos, window) == ("1", "before"):
            raise _Crash  # after the take, before the wait's record is written

    url = f"sqlite:///{tmp_path / 'j.db'}"
    with durably.Engine(url, clock=clock, fault_hook=hook) as engine:

        @engine.workflow(name="wf")
        def wf(ctx: durably.Context) -> Any:
            got = ctx.wait_for_signal("go", timeout_s=0)
            ctx.step("after", lambda: 1)
            return got

        engine.start(wf, run_id="r")
        engine.signal("r", "go", "first")
        engine.signal("r", "go", "second")
        with pytest.raises(_Crash):
            engine.resume("r")
        assert engine.history("r") == []  # nothing recorded: the take was all
        armed["on"] = False
        assert engine.resume("r") == "first"


# -- parking on a wait (with the park machinery) -----------------------------------------


def test_a_timeout_on_the_fake_clock_returns_default_after_parking(
    engine: durably.Engine, clock: durably.FakeClock
) -> None:
    """No signal: the run parks until the deadline (engine.run waits in-process on the
    fake clock: no real sleeping), then records the timeout and returns ``default``."""

    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> Any:
        return ctx.wait_for_signal("approve", timeout_s=3600, default="no answer")

    t0 = clock.time()
    assert engine.run(wf, run_id="r") == "no answer"
    assert clock.time() >= t0 + 3600
    (rec,) = engine.history("r")
    assert (rec.status, rec.output, rec.started_at) == (OK, '{"timeout":true}', t0)
    parked = [e.data for e in engine.events("r").events if e.kind == "run.parked"]
    assert parked and parked[0]["reason"] == (
        "signal 'approve' since 2023-11-14T22:13:20Z (times out at 2023-11-14T23:13:20Z)"
    )
    assert parked[0]["wake_at"] == t0 + 3600


def test_the_deadline_is_recorded_once_and_kept_across_resumes(
    tmp_path: Path, clock: durably.FakeClock
) -> None:
    """A run resumed while parked waits until the deadline recorded when the wait was
    first reached, not a fresh timeout."""
    url = f"sqlite:///{tmp_path / 'j.db'}"
    with durably.Engine(url, clock=clock, park_wait_s=0) as engine:

        @engine.workflow(name="wf")
        def wf(ctx: durably.Context) -> Any:
            return ctx.wait_for_signal("go", timeout_s=100, default="timed out")

        t0 = clock.time()
        with pytest.raises(durably.RunParked):
            engine.run(wf, run_id="r")
        clock.advance(60)
        # Claimed and replayed before the deadline (as after a crash): parks again.
        engine.store.requeue("r", ("parked",))
        with pytest.raises(durably.RunParked) as parked:
            engine.resume("r")
        assert parked.value.wake_at == t0 + 100  # not t0 + 60 + 100
        clock.advance(40)
        assert engine.resume("r") == "timed out"


def test_a_signal_wakes_a_run_waiting_in_process(engine: durably.Engine) -> None:
    import threading

    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> Any:
        got = ctx.wait_for_signal("go")
        return [got, ctx.step("after", lambda: "live")]

    out: list[Any] = []
    engine.start(wf, run_id="r")  # the row exists before the thread drives it
    t = threading.Thread(target=lambda: out.append(engine.run(wf, run_id="r")))
    t.start()
    try:
        _until(lambda: engine.get_run("r").status == "parked")
        run = engine.get_run("r")
        assert run.wake_at is None  # no timeout: only a signal wakes it
        assert run.park_reason is not None and run.park_reason.endswith("(no timeout)")
        assert engine.signal("r", "go", {"ok": True}) == 1
        t.join(30)
    finally:
        if t.is_alive():
            engine.signal("r", "go", "unblock")
            t.join(30)
    assert out == [[{"ok": True}, "live"]]


def test_async_wait_parks_and_times_out(engine: durably.Engine, clock: durably.FakeClock) -> None:
    @engine.workflow(name="awf")
    async def awf(ctx: durably.AsyncContext) -> Any:
        return await ctx.wait_for_signal("go", timeout_s=10, default="late")

    assert engine.run(awf, run_id="r") == "late"


def _until(check: Any, timeout_s: float = 30) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_waits_in_gather_branches_take_their_own_signals(engine: durably.Engine) -> None:
    @engine.workflow(name="awf")
    async def awf(ctx: durably.AsyncContext) -> list[Any]:
        return await ctx.gather(
            ctx.wait_for_signal("a", timeout_s=0), ctx.wait_for_signal("b", timeout_s=0)
        )

    engine.start(awf, run_id="r")
    engine.signal("r", "b", "for b")
    engine.signal("r", "a", "for a")
    assert engine.resume("r") == ["for a", "for b"]
    recs = {r.position: r for r in engine.history("r")}
    assert recs["0"].kind == "gather" and "wait_for_signal:a" in (recs["0"].output or "")
    assert (recs["0.0.0"].name, recs["0.1.0"].name) == ("wait_for_signal:a", "wait_for_signal:b")


def test_engine_signal_retried_after_an_unknown_outcome_sends_once(
    engine: durably.Engine,
) -> None:
    """The store commits, then the reply is lost (a transient error): engine.signal
    retries the same send, which finds the stored signal instead of sending another."""

    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> list[Any]:
        return [ctx.wait_for_signal("go", timeout_s=0, default="none") for _ in range(2)]

    engine.start(wf, run_id="r")
    real = engine.store.send_signal
    failures = {"left": 1}

    def lossy(run_id: str, name: str, data: str, send: str | None = None) -> int:
        seq = real(run_id, name, data, send)
        if failures["left"]:
            failures["left"] -= 1
            raise durably.StoreUnavailable("the connection dropped before the reply")
        return seq

    engine.store.send_signal = lossy  # type: ignore[method-assign]
    assert engine.signal("r", "go", "only once") == 1
    assert failures["left"] == 0  # the failure happened, and was retried
    assert engine.resume("r") == ["only once", "none"]


def test_a_halt_requested_while_parked_lands_at_the_wait_and_takes_nothing(
    tmp_path: Path, clock: durably.FakeClock
) -> None:
    """A cancel asked for while the run is parked on a signal reaches the workflow at the
    wait (live(pos) runs before the take), recorded there over the ``waiting`` record; a
    signal already there is left unconsumed, and a replay raises the halt at the wait."""
    engine = durably.Engine(f"sqlite:///{tmp_path / 'j.db'}", clock=clock, park_wait_s=0)
    seen: list[str] = []
    spy = Spy(engine)

    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> Any:
        try:
            return ctx.wait_for_signal("go", timeout_s=3600)
        except durably.Cancelled as exc:
            seen.append(f"cancelled at the wait: {exc.reason}")
            raise

    with pytest.raises(durably.RunParked):
        engine.run(wf, run_id="c")
    engine.signal("c", "go", "too late")  # wakes it; the cancel comes first
    begin = engine._attempts.begin

    def begin_with_a_cancel(*args: Any, **kwargs: Any) -> Any:
        att = begin(*args, **kwargs)
        core = getattr(att, "core", None)
        if core is not None:
            core.request_halt(durably.Cancelled("run 'c' was cancelled: dup", "dup"))
        return att

    engine._attempts.begin = begin_with_a_cancel  # type: ignore[method-assign]
    takes = len(spy.takes)
    with pytest.raises(durably.DurablyError):
        engine._driver.resume("c", wait=False)
    assert seen == ["cancelled at the wait: dup"]
    assert len(spy.takes) == takes  # the signal was not taken
    (marker,) = engine.history("c")
    assert (marker.kind, marker.name, marker.status) == ("halt", "durably.cancel", "ok")
    engine._attempts.begin = begin  # type: ignore[method-assign]
    engine.store.requeue("c", ("failed", "cancelled"))
    with pytest.raises(durably.DurablyError, match="cancelled: dup"):
        engine.resume("c")
    assert seen == ["cancelled at the wait: dup"] * 2
    assert len(spy.takes) == takes
    engine.close()
