"""Edges of parking found in review (issue 11): damaged ``waiting`` rows block the run
with a clear error instead of crashing or failing it, ``runs why`` words a parked row
whose wake time is no time at all, and a signal from a host whose clock runs ahead
still wakes the run at once.

Every store (a SQLite file, a PostgreSQL schema); rows are edited with plain SQL as an
outside hand would; every engine runs on a FakeClock, so nothing here sleeps.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing
from typing import Any

import pytest
from click.testing import CliRunner

import durably
from durably.cli import main as cli
from durably.store.base import Owner
from durably.store.open import open_store

HOUR = 3600.0


def sql(url: str, statement: str, *params: Any) -> list[tuple[Any, ...]]:
    """One statement on the journal behind ``url``, as an outside process would run it."""
    if url.startswith("sqlite:///"):
        with closing(sqlite3.connect(url[len("sqlite:///") :])) as conn:
            rows = conn.execute(statement, params).fetchall()
            conn.commit()
            return rows
    import psycopg

    with psycopg.connect(url, autocommit=True) as pg:
        cur = pg.execute(statement.replace("?", "%s"), params)  # type: ignore[call-overload]
        return cur.fetchall() if cur.description else []


@pytest.fixture
def clock() -> durably.FakeClock:
    return durably.FakeClock()


@pytest.fixture
def engine(journal_url: str, clock: durably.FakeClock) -> Iterator[durably.Engine]:
    # park_wait_s=0: engine.run returns RunParked instead of waiting, so the test can
    # edit the parked run's rows and then drive it again.
    e = durably.Engine(journal_url, clock=clock, park_wait_s=0)
    yield e
    e.close()


def run_state(url: str) -> tuple[str, str | None, str | None]:
    [(status, owner, reason)] = sql(url, "SELECT status, owner, park_reason FROM runs")
    return status, owner, reason


# -- damaged waiting records -------------------------------------------------------------


@pytest.mark.parametrize("wake_at", ["1e20", "1e300"])
def test_a_timer_recorded_past_any_printable_time_blocks_the_run(
    engine: durably.Engine, journal_url: str, wake_at: str
) -> None:
    """Was: OverflowError out of engine.run (formatting the park reason), the run left
    ``running`` under a lease no one renews; now it is blocked, naming the row."""

    @engine.workflow(name="s")
    def s(ctx: durably.Context) -> int:
        ctx.sleep(HOUR)
        return 1

    with pytest.raises(durably.RunParked):
        engine.run(s, run_id="r")
    sql(journal_url, f"UPDATE steps SET output = '{{\"wake_at\": {wake_at}}}'")
    sql(journal_url, "UPDATE runs SET wake_at = 0")  # due: the next call drives it
    with pytest.raises(durably.SerializationError, match=r"position 0 durably\.sleep.*100 years"):
        engine.run(s, run_id="r")
    status, owner, reason = run_state(journal_url)
    assert (status, owner) == ("blocked", None)
    assert reason is not None and "the recorded timer cannot be read" in reason


@pytest.mark.parametrize(
    "damage",
    [
        "output = '{\"deadline\": NaN}'",
        "output = '{\"deadline\": Infinity}'",
        "output = '{\"deadline\": 1e300}'",
        'output = \'{"deadline": "soon"}\'',
        "started_at = 1e300",
    ],
)
def test_a_signal_wait_recorded_with_a_bad_deadline_or_start_blocks_the_run(
    engine: durably.Engine, journal_url: str, damage: str
) -> None:
    """Was: ValueError/OverflowError raised inside the workflow, so the run ended
    ``failed`` (terminal) over a damaged row; now it is blocked until the row is fixed."""

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> Any:
        return ctx.wait_for_signal("go", timeout_s=HOUR)

    with pytest.raises(durably.RunParked):
        engine.run(w, run_id="r")
    started = engine.clock.time()
    sql(journal_url, f"UPDATE steps SET {damage}")
    sql(journal_url, "UPDATE runs SET wake_at = 0")
    with pytest.raises(durably.SerializationError, match=r"the recorded wait cannot be decoded"):
        engine.run(w, run_id="r")
    status, owner, _ = run_state(journal_url)
    assert (status, owner) == ("blocked", None)
    # Repaired, the run goes on from its wait and keeps the signal for it.
    deadline = engine.clock.time() + 60
    sql(
        journal_url,
        f"UPDATE steps SET started_at = ?, output = '{{\"deadline\": {deadline}}}'",
        started,
    )
    engine.signal("r", "go", {"ok": True})
    engine.retry("r")
    assert engine.run(w, run_id="r") == {"ok": True}


# -- runs why on a parked row whose wake time is no time -------------------------------------


@pytest.mark.parametrize("wake_at", [1e300, float("inf"), float("-inf")])
def test_runs_why_words_a_parked_row_with_an_impossible_wake_time(
    engine: durably.Engine, journal_url: str, wake_at: float
) -> None:
    """Was: a traceback (OverflowError in clock_text); now the sentence says the row's
    value is not a time."""

    @engine.workflow(name="s")
    def s(ctx: durably.Context) -> None:
        ctx.sleep(HOUR)

    with pytest.raises(durably.RunParked):
        engine.run(s, run_id="r")
    sql(journal_url, "UPDATE runs SET wake_at = ?", wake_at)
    out = CliRunner().invoke(cli, ["runs", "why", "r", "--db", journal_url])
    assert out.exit_code == 0, out.output
    assert out.output.startswith("r: parked on a timer")
    assert "not a time" in out.output and len(out.output) < 400


# -- clock skew: a signal from a host whose clock runs ahead ----------------------------------


def test_a_signal_from_a_host_whose_clock_runs_ahead_wakes_the_run_at_once(
    journal_url: str,
) -> None:
    """Was: the wake time was the sender's clock, so a worker whose clock is behind the
    sender's left the run parked for the skew (an hour here) though its signal was there;
    now the wake time is never later than the park, on any clock."""
    here, ahead = durably.FakeClock(), durably.FakeClock()
    ahead.advance(HOUR)  # the sender's clock runs an hour ahead of the worker's
    with durably.Engine(journal_url, clock=here, park_wait_s=0) as engine:

        @engine.workflow(name="w")
        def w(ctx: durably.Context) -> Any:
            return ctx.wait_for_signal("go")

        with pytest.raises(durably.RunParked):
            engine.run(w, run_id="r")
    sender = durably.Engine(journal_url, clock=ahead)
    assert sender.signal("r", "go", 7) == 1
    sender.close()
    here.advance(1)
    store = open_store(journal_url, here)
    try:
        woke = store.get_run("r")
        assert woke is not None and woke.wake_at is not None and woke.wake_at <= here.time()
        taken = store.claim_next(
            Owner("host-a", 100, "1"),
            30,
            10,
            lambda _: False,
            {"w": frozenset({None})},
            ["default"],
        )
        assert taken is not None and taken.run_id == "r"
    finally:
        store.close()


# -- engine.run waiting on a parked row whose wake time is NaN -------------------------------


@pytest.mark.postgres
def test_engine_run_waits_out_a_nan_wake_time_without_a_busy_loop(pg_url: str) -> None:
    """Was: NaN (PostgreSQL keeps it) made every wait slice zero seconds, so engine.run
    read the run's row tens of thousands of times a second, for ever without
    ``park_wait_s``; now a NaN wake time is no wake time: the wait sleeps to its bound."""
    clock = durably.FakeClock()
    with durably.Engine(pg_url, clock=clock, park_wait_s=HOUR) as engine:

        @engine.workflow(name="s")
        def s(ctx: durably.Context) -> int:
            ctx.sleep(2 * HOUR)
            return 1

        engine.park_wait_s = 0
        with pytest.raises(durably.RunParked):
            engine.run(s, run_id="r")
        engine.park_wait_s = HOUR
        sql(pg_url, "UPDATE runs SET wake_at = 'NaN'")
        reads = 0
        get_run = engine.store.get_run

        def counted(run_id: str) -> Any:
            nonlocal reads
            reads += 1
            if reads > 50:
                raise AssertionError("engine.run reads the parked run's row in a loop")
            return get_run(run_id)

        engine.store.get_run = counted  # type: ignore[method-assign]
        start = clock.time()
        with pytest.raises(durably.RunParked) as parked:
            engine.run(s, run_id="r")
        assert clock.time() == start + HOUR  # slept to the bound, once
        assert parked.value.wake_at is None and reads <= 3


# -- timer arguments ------------------------------------------------------------------------


def test_a_sleep_of_an_int_too_large_for_a_float_blocks_the_run(
    engine: durably.Engine, journal_url: str
) -> None:
    """Was: OverflowError (math.isfinite on 10**400) raised inside the workflow, so the
    run ended ``failed``; now it is blocked with the ConfigError every bad duration gets."""

    @engine.workflow(name="s")
    def s(ctx: durably.Context) -> None:
        ctx.sleep(10**400)

    with pytest.raises(durably.ConfigError, match=r"seconds must be a finite number from 0"):
        engine.run(s, run_id="r")
    assert run_state(journal_url)[:2] == ("blocked", None)


def test_a_reached_timer_ignores_its_argument_on_replay(
    engine: durably.Engine, journal_url: str, clock: durably.FakeClock
) -> None:
    """Was: the argument was checked before the record was read, so a duration computed
    from the wall clock (a rate limit's ``reset_at - time.time()``: positive when first
    reached, negative on the replay after the wake) blocked the run with ConfigError at
    a timer that was over. The recorded wake time wins, so the argument of a timer
    reached before is not looked at."""
    reset_at = clock.time() + 60  # e.g. from a rate-limited call's response

    @engine.workflow(name="s")
    def s(ctx: durably.Context) -> str:
        ctx.sleep(reset_at - clock.time())  # the wall clock, as time.time() would be
        return "done"

    with pytest.raises(durably.RunParked):
        engine.run(s, run_id="r")
    clock.advance(61)  # the worker came a second late: the argument is now negative
    assert engine.run(s, run_id="r") == "done"
    assert run_state(journal_url)[0] == "completed"


def test_a_reached_signal_wait_ignores_its_timeout_on_replay(
    engine: durably.Engine, journal_url: str, clock: durably.FakeClock
) -> None:
    """Was: timeout_s was checked before the record was read, so a timeout computed from
    the wall clock (an SLA's ``due_at - time.time()``, negative once it passed) blocked
    the run on the replay after the wake; the recorded deadline wins instead."""
    due_at = clock.time() + 60

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> Any:
        return ctx.wait_for_signal("approve", timeout_s=due_at - clock.time(), default="late")

    with pytest.raises(durably.RunParked):
        engine.run(w, run_id="r")
    clock.advance(61)  # past the deadline: the argument is now negative
    assert engine.run(w, run_id="r") == "late"
    assert run_state(journal_url)[0] == "completed"


def test_a_cancel_from_a_host_whose_clock_runs_ahead_wakes_the_parked_run_at_once(
    journal_url: str,
) -> None:
    """As for a signal: the cancel's wake time was the canceller's clock, so a worker an
    hour behind it left the parked run waiting an hour before it could unwind."""
    here, ahead = durably.FakeClock(), durably.FakeClock()
    ahead.advance(HOUR)
    with durably.Engine(journal_url, clock=here, park_wait_s=0) as engine:

        @engine.workflow(name="w")
        def w(ctx: durably.Context) -> None:
            ctx.sleep(10 * HOUR)

        with pytest.raises(durably.RunParked):
            engine.run(w, run_id="r")
    with durably.Engine(journal_url, clock=ahead) as canceller:
        canceller.cancel("r", reason="duplicate")
    here.advance(1)
    store = open_store(journal_url, here)
    try:
        me, served = Owner("host-a", 100, "1"), {"w": frozenset({None})}
        taken = store.claim_next(me, 30, 10, lambda _: False, served, ["default"])
        assert taken is not None and taken.run_id == "r"
    finally:
        store.close()


# -- RunParked says how a signal wait becomes due -----------------------------------------


def test_run_parked_on_a_signal_says_how_to_send_it(engine: durably.Engine) -> None:
    """Was: 'a worker resumes it when it is due' only, though a signal wait without a
    timeout is due only once its signal is sent; now the message says how to send it."""

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> Any:
        return ctx.wait_for_signal("approve")

    with pytest.raises(durably.RunParked) as parked:
        engine.run(w, run_id="r")
    text = str(parked.value)
    assert "signal 'approve' since" in text
    assert "engine.signal('r', NAME, data)" in text and "`durably signal r NAME" in text

    @engine.workflow(name="s")
    def s(ctx: durably.Context) -> None:
        ctx.sleep(HOUR)

    with pytest.raises(durably.RunParked) as timer:
        engine.run(s, run_id="t")
    assert "durably signal" not in str(timer.value)  # a timer needs no one to act
