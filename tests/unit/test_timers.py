"""Durable timers: ``ctx.sleep``/``ctx.sleep_until`` park the run, and it wakes at the
wake time it recorded.

Every test here runs on a FakeClock: ``engine.run`` waiting in-process moves the clock to
the wake time instead of sleeping, so nothing here sleeps. The real-time paths are
covered by the worker test below (a real Worker thread on a SQLite file, a short timer)
and by tests/crash/test_timer_crash.py (a real SIGKILL while parked).
"""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import durably
from durably.cli import main as cli
from durably.replaycheck import check_runs
from durably.worker import Worker

HOUR = 3600.0


@pytest.fixture
def clock() -> durably.FakeClock:
    return durably.FakeClock()


@pytest.fixture
def engine(journal_url: str, clock: durably.FakeClock) -> Iterator[durably.Engine]:
    e = durably.Engine(journal_url, clock=clock)
    yield e
    e.close()


def sleeper(engine: durably.Engine, calls: list[str], seconds: float = HOUR) -> durably.Workflow:
    """``a``, a timer of ``seconds``, ``b``; returns the recorded times around the timer."""

    @engine.workflow(name="sleeper")
    def wf(ctx: durably.Context, x: int) -> dict[str, Any]:
        ctx.step("a", lambda: calls.append("a"))
        before = ctx.now()
        ctx.sleep(seconds)
        after = ctx.now()
        ctx.step("b", lambda: calls.append("b"))
        return {"x": x, "slept": (after - before).total_seconds()}

    return wf


def kinds(engine: durably.Engine, run_id: str) -> list[str]:
    return [e.kind for e in engine.events(run_id).events]


def sleep_records(engine: durably.Engine, run_id: str) -> list[tuple[str, str, Any]]:
    return [
        (r.position, r.status, json.loads(r.output or "null"))
        for r in engine.history(run_id)
        if r.kind == "sleep"
    ]


# -- engine.run waits in-process, then replays ------------------------------------------


def test_sleep_parks_and_engine_run_waits_then_replays(
    engine: durably.Engine, clock: durably.FakeClock
) -> None:
    calls: list[str] = []
    wf = sleeper(engine, calls)
    start = clock.time()
    assert engine.run(wf, 7, run_id="r") == {"x": 7, "slept": HOUR}
    assert clock.time() == start + HOUR  # waited exactly to the recorded wake time
    assert calls == ["a", "b"]  # "a" replayed after the wake, never ran again
    assert sleep_records(engine, "r") == [("2", "ok", {"wake_at": start + HOUR})]
    run = engine.get_run("r")
    assert run.status == "completed" and run.starts == 2
    assert run.park_reason is None and run.wake_at is None
    events = engine.events("r").events
    parked = [e.data for e in events if e.kind == "run.parked"]
    assert parked == [
        {"kind": "timer", "reason": "timer until 2023-11-14T23:13:20Z", "wake_at": start + HOUR}
    ]
    assert kinds(engine, "r").count("run.started") == 2


def test_sleep_until_an_aware_datetime(engine: durably.Engine, clock: durably.FakeClock) -> None:
    when = dt.datetime.fromtimestamp(clock.time() + 90, dt.UTC).astimezone(
        dt.timezone(dt.timedelta(hours=-5))  # any zone: an aware datetime is an instant
    )

    @engine.workflow(name="until")
    def wf(ctx: durably.Context) -> str:
        ctx.sleep_until(when)
        return ctx.now().isoformat()

    assert (
        engine.run(wf, run_id="u")
        == dt.datetime.fromtimestamp(when.timestamp(), dt.UTC).isoformat()
    )
    assert sleep_records(engine, "u") == [("0", "ok", {"wake_at": when.timestamp()})]


def test_a_time_already_past_and_sleep_zero_record_and_return_without_parking(
    engine: durably.Engine, clock: durably.FakeClock
) -> None:
    start = clock.time()

    @engine.workflow(name="quick")
    def wf(ctx: durably.Context) -> int:
        ctx.sleep(0)
        ctx.sleep_until(dt.datetime(2001, 1, 1, tzinfo=dt.UTC))
        return 1

    assert engine.run(wf, run_id="q") == 1
    assert clock.time() == start
    assert sleep_records(engine, "q") == [
        ("0", "ok", {"wake_at": start}),
        ("1", "ok", {"wake_at": dt.datetime(2001, 1, 1, tzinfo=dt.UTC).timestamp()}),
    ]
    assert "run.parked" not in kinds(engine, "q") and engine.get_run("q").starts == 1


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (lambda ctx: ctx.sleep(-1), "finite number from 0"),
        (lambda ctx: ctx.sleep(float("nan")), "finite number from 0"),
        (lambda ctx: ctx.sleep(float("inf")), "finite number from 0"),
        (lambda ctx: ctx.sleep("10"), "finite number from 0"),
        (lambda ctx: ctx.sleep(True), "finite number from 0"),
        (lambda ctx: ctx.sleep(1e12), "100 years"),
        (lambda ctx: ctx.sleep_until(dt.datetime(2030, 1, 1)), r"naive \(no timezone\)"),
        (lambda ctx: ctx.sleep_until(1_900_000_000), "timezone-aware datetime"),
    ],
)
def test_a_bad_timer_blocks_the_run_with_a_clear_error(
    tmp_path: Path, call: Any, words: str
) -> None:
    engine = durably.Engine(f"sqlite:///{tmp_path / 'j.db'}", clock=durably.FakeClock())

    @engine.workflow(name="bad")
    def wf(ctx: durably.Context) -> None:
        try:
            call(ctx)
        except durably.ConfigError:
            pass  # caught, yet the run is blocked: it was poisoned
        ctx.step("never", lambda: None)

    with pytest.raises(durably.ConfigError, match=words) as err:
        engine.run(wf, run_id="b")
    assert "The run is blocked; fix the code, then resume it." in str(err.value)
    assert engine.get_run("b").status == "blocked"
    assert engine.history("b") == []


# -- replay: the recorded wake time wins --------------------------------------------------


def test_a_parked_run_replays_to_the_same_recorded_wake_time(
    tmp_path: Path, clock: durably.FakeClock
) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    calls: list[str] = []
    first = durably.Engine(url, clock=clock, park_wait_s=0)
    wf = sleeper(first, calls)
    start = clock.time()
    with pytest.raises(durably.RunParked) as parked:
        first.run(wf, 1, run_id="p")
    assert parked.value.run_id == "p" and parked.value.wake_at == start + HOUR
    assert parked.value.reason == "timer until 2023-11-14T23:13:20Z"
    assert "durably worker MODULE:ENGINE" in str(parked.value)
    assert "stays parked" in str(parked.value)
    run = first.get_run("p")
    assert (run.status, run.wake_at, run.owner, run.lease_expires_at) == (
        "parked",
        start + HOUR,
        None,
        None,
    )
    assert sleep_records(first, "p") == [("2", "waiting", {"wake_at": start + HOUR})]
    first.close()

    # Half an hour later a deploy shortens the timer to a minute: the run keeps its hour.
    clock.advance(HOUR / 2)
    calls.clear()
    second = durably.Engine(url, clock=clock, park_wait_s=0)
    sleeper(second, calls, seconds=60)
    with pytest.raises(durably.RunParked) as again:
        second.resume("p")
    assert again.value.wake_at == start + HOUR
    assert second.get_run("p").wake_at == start + HOUR
    assert sleep_records(second, "p") == [("2", "waiting", {"wake_at": start + HOUR})]
    assert calls == []  # "a" replayed: nothing ran again

    # Due: the waiting record gives way to its result, and the run goes on.
    clock.advance(HOUR / 2)
    assert second.resume("p") == {"x": 1, "slept": HOUR}
    assert sleep_records(second, "p") == [("2", "ok", {"wake_at": start + HOUR})]
    assert calls == ["b"]
    # A new run takes the new duration.
    second.park_wait_s = None
    registered = second._registry.resolve("sleeper")
    assert second.run(registered, 2, run_id="p2") == {"x": 2, "slept": 60.0}
    second.close()


def test_engine_run_on_a_parked_run_waits_for_it_without_claiming_early(
    engine: durably.Engine, clock: durably.FakeClock, journal_url: str
) -> None:
    calls: list[str] = []
    impatient = durably.Engine(journal_url, clock=clock, park_wait_s=10)
    wf = sleeper(impatient, calls)
    start = clock.time()
    with pytest.raises(durably.RunParked):
        impatient.run(wf, 3, run_id="w")
    assert clock.time() == start + 10  # waited its bound on the (fake) clock, no more
    assert impatient.get_run("w").starts == 1  # never claimed before it was due
    impatient.close()
    sleeper(engine, calls)
    assert engine.run("sleeper", 3, run_id="w") == {"x": 3, "slept": HOUR}
    assert clock.time() == start + HOUR and engine.get_run("w").starts == 2


def test_replacing_a_timer_with_a_step_is_a_nondeterminism(
    tmp_path: Path, clock: durably.FakeClock
) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    old = durably.Engine(url, clock=clock, park_wait_s=0)
    with pytest.raises(durably.RunParked):
        old.run(sleeper(old, []), 1, run_id="n")
    old.close()
    new = durably.Engine(url, clock=clock)

    @new.workflow(name="sleeper")
    def wf(ctx: durably.Context, x: int) -> None:
        ctx.step("a", lambda: None)
        ctx.now()
        ctx.step("wait", lambda: None)  # was ctx.sleep(3600)

    with pytest.raises(durably.NonDeterminism, match=r"history has 'durably.sleep'"):
        new.resume("n")
    assert new.get_run("n").status == "blocked"


def test_a_finished_timer_replays_without_parking(
    engine: durably.Engine, clock: durably.FakeClock
) -> None:
    class Crash(BaseException):
        pass

    crashes = [True]

    def b() -> str:
        if crashes:
            crashes.pop()
            raise Crash
        return "b"

    @engine.workflow(name="crashy")
    def wf(ctx: durably.Context) -> str:
        ctx.sleep(60)
        return ctx.step("b", b)

    with pytest.raises(Crash):
        engine.run(wf, run_id="c")
    waited_until = clock.time()
    assert engine.run(wf, run_id="c") == "b"
    assert clock.time() == waited_until  # the recorded ok: no second wait
    assert kinds(engine, "c").count("run.parked") == 1


class RacingClock(durably.FakeClock):
    """A fake clock on which, the moment ``engine.run`` sleeps to the wake time, another
    process (``taker``) claims the due run and drives it in a thread of its own."""

    taker: durably.Engine | None = None
    threads: list[threading.Thread]

    def sleep(self, seconds: float) -> None:
        super().sleep(seconds)
        taker, self.taker = self.taker, None
        if taker is not None:
            run = taker.claim_next(["default"])
            assert run is not None
            self.threads = [threading.Thread(target=taker.execute_claimed, args=(run,))]
            self.threads[0].start()


def test_engine_run_follows_a_worker_that_took_the_due_run_to_its_outcome(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    clock = RacingClock()
    mine, theirs = durably.Engine(url, clock=clock), durably.Engine(url, clock=clock)
    release = threading.Event()
    drivers: list[str] = []

    for engine, me in ((mine, "mine"), (theirs, "theirs")):

        def slow_b(me: str = me) -> str:
            drivers.append(me)
            release.wait(10)  # the other driver is still at it when engine.run looks
            return me

        @engine.workflow(name="race")
        def wf(ctx: durably.Context, slow_b: Any = slow_b) -> str:
            ctx.sleep(60)
            return str(ctx.step("b", slow_b))

    clock.taker = theirs
    threading.Timer(0.3, release.set).start()
    # engine.run waits for the timer; "theirs" claims it when due and drives it; this
    # call follows that run to its outcome instead of raising RunLeased.
    assert mine.run("race", run_id="r") == "theirs"
    clock.threads[0].join(10)
    assert drivers == ["theirs"]
    assert mine.get_run("r").status == "completed"
    mine.close()
    theirs.close()


def test_a_halt_requested_while_parked_lands_at_the_timer_and_replays_there(
    tmp_path: Path, clock: durably.FakeClock
) -> None:
    """A cancel asked for while the run is parked reaches the workflow at its timer (the
    position that would go live), recorded there over the ``waiting`` record; a replay
    raises it at the same place, never sleeping again. (engine.cancel builds on this; here
    the halt is requested when the run is claimed, as it will.)"""
    engine = durably.Engine(f"sqlite:///{tmp_path / 'j.db'}", clock=clock, park_wait_s=0)
    seen: list[str] = []

    @engine.workflow(name="nap")
    def wf(ctx: durably.Context) -> str:
        ctx.step("a", lambda: "a")
        try:
            ctx.sleep(HOUR)
        except durably.Cancelled as exc:
            seen.append(f"cancelled at the timer: {exc.reason}")
            raise
        return "woke"

    with pytest.raises(durably.RunParked):
        engine.run(wf, run_id="c")
    begin = engine._attempts.begin

    def begin_with_a_cancel(*args: Any, **kwargs: Any) -> Any:
        att = begin(*args, **kwargs)
        core = getattr(att, "core", None)
        if core is not None:
            core.request_halt(durably.Cancelled("run 'c' was cancelled: dup", "dup"))
        return att

    engine._attempts.begin = begin_with_a_cancel  # type: ignore[method-assign]
    clock.advance(60)  # long before the wake time: a parked run is woken to unwind
    engine.park_wait_s = None
    with pytest.raises(durably.DurablyError):
        engine._driver.resume("c", wait=False)
    assert seen == ["cancelled at the timer: dup"]
    (marker,) = [r for r in engine.history("c") if r.position == "1"]
    assert (marker.kind, marker.name, marker.status) == ("halt", "durably.cancel", "ok")
    engine._attempts.begin = begin  # type: ignore[method-assign]
    engine.store.requeue("c", ("failed", "cancelled"))
    # The replay raises it at the timer again: no sleep. (How the run ends is the
    # cancel's business: `cancelled` once engine.cancel lands.)
    with pytest.raises(durably.DurablyError, match="cancelled: dup"):
        engine.resume("c")
    assert seen == ["cancelled at the timer: dup"] * 2
    assert clock.time() == durably.FakeClock().time() + 60
    engine.close()


# -- async workflows ----------------------------------------------------------------------


def test_async_sleep_and_sleep_until(engine: durably.Engine, clock: durably.FakeClock) -> None:
    start = clock.time()

    @engine.workflow(name="asleep")
    async def wf(ctx: durably.AsyncContext) -> float:
        await ctx.sleep(30)
        await ctx.sleep_until(dt.datetime.fromtimestamp(start + 100, dt.UTC))
        return (await ctx.now()).timestamp()

    assert engine.run(wf, run_id="a") == start + 100
    assert [s for _, s, _ in sleep_records(engine, "a")] == ["ok", "ok"]
    assert kinds(engine, "a").count("run.parked") == 2


def test_run_async_waits_off_the_event_loop_and_raises_run_parked_past_the_bound(
    tmp_path: Path, clock: durably.FakeClock
) -> None:
    import asyncio

    url = f"sqlite:///{tmp_path / 'j.db'}"
    bounded = durably.Engine(url, clock=clock, park_wait_s=5)

    @bounded.workflow(name="asleep")
    async def wf(ctx: durably.AsyncContext) -> str:
        await ctx.sleep(60)
        return "awake"

    with pytest.raises(durably.RunParked):
        asyncio.run(bounded.run_async(wf, run_id="a"))
    bounded.park_wait_s = None
    assert asyncio.run(bounded.run_async(wf, run_id="a")) == "awake"
    bounded.close()


def test_an_unawaited_async_sleep_blocks_the_run(
    engine: durably.Engine, clock: durably.FakeClock
) -> None:
    @engine.workflow(name="forgot")
    async def wf(ctx: durably.AsyncContext) -> None:
        ctx.sleep(60)  # type: ignore[unused-coroutine]  # the mistake under test
        await ctx.step("next", lambda: None)

    with pytest.raises(durably.ConfigError, match=r"ctx.sleep\(...\) was never awaited"):
        engine.run(wf, run_id="f")
    assert engine.get_run("f").status == "blocked"
    assert clock.time() == durably.FakeClock().time()  # nothing waited


def test_a_timer_in_a_gather_branch_parks_the_run(
    engine: durably.Engine, clock: durably.FakeClock
) -> None:
    ran: list[str] = []

    def slow() -> str:
        time.sleep(0.2)  # still in flight when its sibling parks
        ran.append("slow")
        return "slow"

    async def later(ctx: durably.AsyncContext) -> str:
        await ctx.sleep(60)
        return await ctx.step("late", lambda: ran.append("late") or "late")

    @engine.workflow(name="branches")
    async def wf(ctx: durably.AsyncContext) -> list[Any]:
        return await ctx.gather(ctx.step("slow", slow), later(ctx))

    assert engine.run(wf, run_id="g") == ["slow", "late"]
    # The sibling in flight finished and was recorded before the run parked: each step
    # ran once across the park.
    assert ran == ["slow", "late"]
    assert [p for p, _, _ in sleep_records(engine, "g")] == ["0.1.0"]


# -- what other tools make of a waiting record --------------------------------------------


def test_fork_does_not_copy_a_timer_in_progress_and_replay_check_stops_at_it(
    tmp_path: Path, clock: durably.FakeClock
) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    engine = durably.Engine(url, clock=clock, park_wait_s=0)
    calls: list[str] = []
    with pytest.raises(durably.RunParked):
        engine.run(sleeper(engine, calls), 1, run_id="src")
    forked = engine.fork("src", at=3)
    copied = [(r.position, r.status) for r in engine.history(forked.run_id)]
    assert copied == [("0", "ok"), ("1", "ok")]  # the waiting timer at 2 is not copied

    # Code after the timer changed: the run's history ends at its timer, so no finding.
    changed = durably.Engine(url, clock=clock)

    @changed.workflow(name="sleeper")
    def wf(ctx: durably.Context, x: int) -> None:
        ctx.step("a", lambda: None)
        ctx.now()
        ctx.sleep(HOUR)
        ctx.step("renamed", lambda: None)

    report = check_runs(changed, [changed.get_run("src")])
    assert report.checked == 1 and report.findings == []
    assert sleep_records(changed, "src") == [("2", "waiting", {"wake_at": clock.time() + HOUR})]


def test_runs_list_and_show_give_the_park_reason(tmp_path: Path, clock: durably.FakeClock) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    engine = durably.Engine(url, clock=clock, park_wait_s=0)
    with pytest.raises(durably.RunParked):
        engine.run(sleeper(engine, []), 1, run_id="s")
    runner = CliRunner()
    listed = runner.invoke(cli, ["runs", "list", "--status", "parked", "--db", url, "--json"])
    assert listed.exit_code == 0, listed.output
    (row,) = json.loads(listed.output)
    assert row["run_id"] == "s" and row["status"] == "parked"
    assert row["reason"] == "timer until 2023-11-14T23:13:20Z"
    assert row["wake_at"] == clock.time() + HOUR
    wide = {"COLUMNS": "250"}
    table = runner.invoke(cli, ["runs", "list", "--status", "parked", "--db", url], env=wide)
    assert "parked(timer until 2023-11-14T23:13:20Z)" in " ".join(table.output.split())
    shown = runner.invoke(cli, ["runs", "show", "s", "--db", url], env=wide)
    text = " ".join(shown.output.split())
    assert "why: timer until 2023-11-14T23:13:20Z" in text
    assert "2 durably.sleep waiting waiting" in text
    shown_json = json.loads(runner.invoke(cli, ["runs", "show", "s", "--db", url, "--json"]).output)
    assert shown_json["steps"][2]["status"] == "waiting"
    assert shown_json["steps"][2]["output"] == {"wake_at": clock.time() + HOUR}


# -- workers ------------------------------------------------------------------------------


def test_a_worker_frees_its_slot_while_a_run_is_parked_and_resumes_it_when_due(
    tmp_path: Path,
) -> None:
    # A fake clock: the timer is due when the test moves the clock, not after a real
    # 0.8 s that the quick run had to beat (a loaded machine took longer, and the test
    # failed with nothing wrong).
    clock = durably.FakeClock(time.time())
    engine = durably.Engine(f"sqlite:///{tmp_path / 'j.db'}", clock=clock)
    ran: list[str] = []

    @engine.workflow(name="nap")
    def nap(ctx: durably.Context, i: int) -> int:
        ctx.step("first", lambda: ran.append(f"first-{i}"))
        ctx.sleep(HOUR)
        ctx.step("second", lambda: ran.append(f"second-{i}"))
        return i

    @engine.workflow(name="quick")
    def quick(ctx: durably.Context) -> str:
        return ctx.step("only", lambda: "done")

    sleepy = engine.start(nap, 1, run_id="nap")
    worker = Worker(engine, concurrency=1, poll_interval_s=0.02)
    t = threading.Thread(target=worker.run)
    t.start()
    try:
        deadline = time.monotonic() + 30
        while engine.get_run("nap").status != "parked":
            assert time.monotonic() < deadline
            time.sleep(0.01)
        # One slot, and the parked run does not hold it: another run goes through now.
        assert engine.start(quick, run_id="quick").result(timeout_s=30) == "done"
        assert engine.get_run("nap").status == "parked"  # not woken before it was due
        assert ran == ["first-1"]
        clock.advance(HOUR)
        assert sleepy.result(timeout_s=30) == 1
    finally:
        worker.stop()
        t.join(10)
    assert ran == ["first-1", "second-1"]
    assert worker.stats.other["parked"] == 1
    assert worker.stats.completed == 2 and worker.stats.claimed == 3
    engine.close()


@pytest.mark.parametrize("bad", [-1, float("nan"), "10", True])
def test_park_wait_s_refuses_what_is_not_a_number_of_seconds(tmp_path: Path, bad: Any) -> None:
    with pytest.raises(durably.ConfigError, match=r"park_wait_s=.*must be None"):
        durably.Engine(f"sqlite:///{tmp_path / 'j.db'}", park_wait_s=bad)


@pytest.mark.parametrize("huge", [10**400, float("inf")])
def test_a_park_wait_past_any_float_is_no_bound(tmp_path: Path, huge: Any) -> None:
    """10**400 used to overflow where engine.run computed the wait's deadline."""
    clock = durably.FakeClock()
    with durably.Engine(f"sqlite:///{tmp_path / 'j.db'}", clock=clock, park_wait_s=huge) as e:
        assert e.park_wait_s is None

        @e.workflow(name="w")
        def w(ctx: durably.Context) -> str:
            ctx.sleep(60)
            return "woke"

        assert e.run(w, run_id="r") == "woke"
