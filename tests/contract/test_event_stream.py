"""The run's event stream on every store: every kind written by real runs, the data
fields the table documents, cursors 1..n in commit order, emits once per position under
replay, and a write repeated after an unknown outcome stored once."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import durably
from durably.clock import FakeClock
from durably.errors import ConfigError, LeaseLost, RunNotFound, StaleLease
from durably.events import EVENT_KINDS, USER, Event, new_event
from durably.history import CANCELLED, PARKED, StepRecord
from durably.store.owner import Owner

KINDS = {k.kind: k for k in EVENT_KINDS}


class Crash(BaseException):
    """Stands in for a process death inside one process (real deaths: tests/crash)."""


class Flaky(Exception):
    """A failure the retried step raises once."""


def crash_at(position: str, window: str) -> Any:
    """A fault hook that raises Crash once, at ``position`` in ``window``."""
    armed = {"on": True}

    def hook(run_id: str, pos: str, name: str, win: str) -> None:
        if armed["on"] and (pos, win) == (position, window):
            armed["on"] = False
            raise Crash(f"{pos}:{win}")

    return hook


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def engine(journal_url: str, clock: FakeClock) -> Iterator[durably.Engine]:
    e = durably.Engine(journal_url, clock=clock, lease_s=30)
    yield e
    e.close()


def kinds(engine: durably.Engine, run_id: str) -> list[str]:
    return [e.kind for e in engine.events(run_id).events]


def all_events(engine: durably.Engine, run_id: str) -> list[Event]:
    page = engine.events(run_id)
    assert len(page.events) < 1000
    return page.events


def other_owner(pid: int = 999_999) -> Owner:
    """An owner that is not this process (its liveness is decided by each test)."""
    return Owner("elsewhere", pid, "0", "")


def test_every_kind_is_written_by_real_runs(engine: durably.Engine, clock: FakeClock) -> None:
    seen: dict[str, list[Event]] = {}
    store = engine.store
    calls = {"flaky": 0}
    names = ["plan"]

    @durably.step(retries=1, backoff=0.01)
    def flaky() -> str:
        calls["flaky"] += 1
        if calls["flaky"] == 1:
            raise Flaky("first try fails")
        return "ok"

    @engine.workflow()
    def good(ctx: durably.Context) -> str:
        ctx.emit("progress", {"pct": 50})
        return ctx.step("flaky", flaky)

    @engine.workflow()
    def bad(ctx: durably.Context) -> None:
        ctx.step("boom", lambda: 1 / 0)

    @engine.workflow()
    def drifting(ctx: durably.Context) -> None:
        ctx.step(names[0], lambda: 1)
        ctx.step("next", lambda: 2)

    @durably.step(effect=True)
    def send() -> str:
        return "sent"

    @engine.workflow()
    def effect(ctx: durably.Context) -> str:
        return ctx.step("send", send)

    @engine.workflow()
    def idle(ctx: durably.Context) -> int:
        return 1

    @engine.workflow()
    def waits(ctx: durably.Context) -> object:
        return ctx.wait_for_signal("go", timeout_s=0)

    @engine.workflow()
    def streamed(ctx: durably.Context) -> str:
        def pieces(c: dict[str, str]) -> list[dict[str, object]]:
            return [{"text": c["t"]}] if "t" in c else [{"tool": 0, "arguments": c["a"]}]

        chunks = [{"t": "Hi"}, {"a": '{"x": 1}'}]
        got = list(ctx.step_stream("model", lambda: iter(chunks), deltas=pieces))
        return str(len(got))

    assert engine.run(good, run_id="good") == "ok"
    assert engine.run(streamed, run_id="streamed") == "2"
    assert engine.store.flush_stream(5)
    with pytest.raises(durably.WorkflowFailed):
        engine.run(bad, run_id="bad")
    engine.retry("bad")  # run.resumed
    with pytest.raises(durably.WorkflowFailed):
        engine.resume("bad")

    # A real NonDeterminism: the code changes between a crash and the resume.
    engine.fault_hook = crash_at("1", "recorded")
    with pytest.raises(Crash):
        engine.run(drifting, run_id="drifting")
    names[0] = "renamed"
    with pytest.raises(durably.NonDeterminism):
        engine.resume("drifting")

    # A real effect in doubt: crash between the effect and its record, then resume.
    engine.fault_hook = crash_at("0", "effect")
    with pytest.raises(Crash):
        engine.run(effect, run_id="effect")
    engine.fault_hook = None
    with pytest.raises(durably.RunInDoubt):
        engine.resume("effect")

    # A signal sent before its wait is reached (its data stays out of the stream).
    engine.start(waits, run_id="signalled")
    assert engine.signal("signalled", "go", {"token": "s3cr3t"}) == 1
    assert engine.resume("signalled") == {"token": "s3cr3t"}

    # An approval request that expires (engine.run waits on the fake clock).
    @engine.workflow()
    def asking(ctx: durably.Context) -> str:
        return ctx.request_approval("refund", {"amount": 1}, timeout_s=60).outcome

    assert engine.run(asking, run_id="asking") == "expired"

    # Takeovers: a lease that ran out, and a holder judged gone before it ran out.
    engine.start(idle, run_id="expired")
    store.claim("expired", other_owner(), 5, 10, lambda _: False)
    clock.advance(6)
    assert engine.resume("expired") == 1
    engine.start(idle, run_id="lost")
    store.claim("lost", other_owner(), 300, 10, lambda _: False)
    taken = store.claim("lost", other_owner(2), 300, 10, lambda _: True)

    # Quarantine: started twice without progress under max_starts=1.
    engine.start(idle, run_id="stuck")
    store.claim("stuck", other_owner(), 5, 1, lambda _: False)
    clock.advance(6)
    with pytest.raises(durably.RunQuarantined):
        store.claim("stuck", other_owner(), 5, 1, lambda _: False)

    # Parking has no public API yet (a later issue): its store write.
    store.release("lost", taken.fencing_token, PARKED, "timer", wake_at=clock.time() + 60)
    # A cancel of a queued run that never ran: requested, and ended at once.
    engine.start(idle, run_id="cancel")
    assert engine.cancel("cancel", reason="asked to").status == CANCELLED

    # A long-lived run: past its (lowered) warning, then continued as new.
    engine.history_warn = (2, 10**9)

    @engine.workflow()
    def long_lived(ctx: durably.Context, n: int) -> int:
        for i in range(3):
            ctx.step("tick", lambda i=i: i)
        return n if n else ctx.continue_as_new(1)

    assert engine.run(long_lived, 0, run_id="long") == 1
    engine.history_warn = (10_000, 10 * 1024 * 1024)

    runs = (
        "good",
        "bad",
        "drifting",
        "effect",
        "signalled",
        "asking",
        "expired",
        "lost",
        "stuck",
        "cancel",
        "streamed",
        "long",
    )
    for run_id in runs:
        events = all_events(engine, run_id)
        assert [e.cursor for e in events] == list(range(1, len(events) + 1)), run_id
        for e in events:
            assert e.run_id == run_id
            seen.setdefault(e.kind, []).append(e)
    assert set(seen) == set(KINDS), set(KINDS) ^ set(seen)

    for kind, events in seen.items():
        for e in events:  # the table in events.py (and docs/events.md) is the truth
            assert set(e.data) <= set(KINDS[kind].fields), (kind, e.data)
    assert kinds(engine, "good") == [
        "run.created",
        "lease.taken",
        "run.started",
        "user",
        "step.started",
        "step.retried",
        "step.completed",
        "run.completed",
    ]
    done = seen["step.completed"][0].data
    assert done["name"] == "flaky" and done["attempt"] == 2 and done["key"].startswith("good:")
    retried = seen["step.retried"][0].data
    assert retried["error_type"].endswith("Flaky") and retried["error_message"] == "first try fails"
    assert seen["user"][0].data == {"kind": "progress", "data": {"pct": 50}}
    failed = [e.data for e in seen["run.failed"]]
    assert failed[0]["error_type"] == "ZeroDivisionError"
    assert seen["run.resumed"][0].data == {"previous": "failed", "reason": "retry"}
    assert "renamed" in seen["run.blocked"][0].data["reason"]
    assert "send" in seen["run.in_doubt"][0].data["reason"]
    assert [e.data["owner"] for e in seen["lease.expired"]] == [str(other_owner())]
    assert [e.data["owner"] for e in seen["lease.lost"]] == [str(other_owner())]
    assert seen["run.quarantined"][0].data == {"starts": 1}
    assert seen["run.cancelled"][0].data == {"reason": "asked to"}
    assert [e.data for e in seen["signal.received"]] == [{"name": "go", "seq": 1}]
    requested = seen["approval.requested"][0]
    assert requested.position == "0" and requested.data["action"] == "refund"
    assert seen["approval.decided"][0].data == {"request_id": "0", "outcome": "expired"}
    assert all(e.position is None for e in seen["run.started"])
    assert seen["step.completed"][0].position == "0"


def test_paging_reads_every_event_once_and_says_when_finished(engine: durably.Engine) -> None:
    @engine.workflow()
    def many(ctx: durably.Context) -> int:
        for i in range(5):
            ctx.step(f"s{i}", lambda i=i: i)
        return 5

    engine.run(many, run_id="many")
    total = all_events(engine, "many")
    got: list[int] = []
    page = engine.events("many", after=0, limit=3)
    while True:
        got += [e.cursor for e in page.events]
        if page.finished:
            break
        assert page.events, "an unfinished page of a finished run holds events"
        page = engine.events("many", after=page.cursor, limit=3)
    assert got == [e.cursor for e in total]
    assert engine.events("many", after=len(total)).finished
    past = engine.events("many", after=len(total) + 5)
    assert past.events == [] and past.cursor == len(total) + 5
    with pytest.raises(RunNotFound, match="durably runs list"):
        engine.events("nope")
    with pytest.raises(ConfigError, match="after must be an event cursor"):
        engine.events("many", after=-1)
    with pytest.raises(ConfigError, match="limit must be"):
        engine.events("many", limit=0)
    with pytest.raises(RunNotFound):
        engine.follow("nope")


def test_emit_is_recorded_once_per_position_under_replay(engine: durably.Engine) -> None:
    @engine.workflow()
    def chatty(ctx: durably.Context) -> int:
        ctx.emit("begin", None)
        ctx.step("one", lambda: 1)
        ctx.emit("between", 1)
        ctx.emit("between", 2)  # a second emit at the same position: index 1
        ctx.step("two", lambda: 2)
        ctx.emit("after-two", {"buffered": True})  # not yet committed when "three" dies
        ctx.step("three", lambda: 3)
        ctx.emit("end", None)
        return 3

    engine.fault_hook = crash_at("2", "before")
    with pytest.raises(Crash):
        engine.run(chatty, run_id="chatty")
    engine.fault_hook = crash_at("2", "before")  # the replay dies at the same place
    with pytest.raises(Crash):
        engine.resume("chatty")
    engine.fault_hook = None
    assert engine.resume("chatty") == 3
    user = [(e.position, e.data) for e in all_events(engine, "chatty") if e.kind == USER]
    assert user == [
        ("0", {"kind": "begin", "data": None}),
        ("1", {"kind": "between", "data": 1}),
        ("1", {"kind": "between", "data": 2}),
        ("2", {"kind": "after-two", "data": {"buffered": True}}),
        ("3", {"kind": "end", "data": None}),
    ]


def test_emit_refuses_bad_input_with_a_clear_message(engine: durably.Engine) -> None:
    @engine.workflow()
    def wf(ctx: durably.Context, kind: Any, storable: bool) -> None:
        ctx.emit(kind, None if storable else object())

    with pytest.raises(durably.WorkflowFailed, match="kind must be a non-empty str"):
        engine.run(wf, "", True, run_id="empty-kind")
    with pytest.raises(durably.WorkflowFailed, match=r"ctx.emit\('k'\).*JSON"):
        engine.run(wf, "k", False, run_id="bad-data")


@pytest.mark.parametrize("with_record", [True, False], ids=["record", "events-alone"])
def test_a_write_repeated_after_an_unknown_outcome_stores_its_events_once(
    engine: durably.Engine, clock: FakeClock, with_record: bool
) -> None:
    # Events alone: a step's retry commits its events with no record; the token fences
    # them all the same.
    store = engine.store

    @engine.workflow()
    def idle(ctx: durably.Context) -> None:
        return None

    engine.start(idle, run_id="r")
    run = store.claim("r", other_owner(), 300, 10, lambda _: False)
    rec = StepRecord("0", "step", "s", "d" * 64, "ok", "1", started_at=1.0, finished_at=2.0)
    records = [rec] if with_record else []
    ev = new_event("step.completed", "0", {"name": "s"}, clock.time(), "t1:step.completed:0")
    store.append("r", run.fencing_token, records, [ev])
    store.append("r", run.fencing_token, records, [ev])  # the same write, again
    assert kinds(engine, "r").count("step.completed") == 1
    # A repeat before a new event in one write: the new one takes the next cursor, no gap.
    also = new_event(USER, "0", {"n": 1}, clock.time(), "t1:emit:0:0")
    store.append("r", run.fencing_token, [], [ev, also])
    cursors = [e.cursor for e in all_events(engine, "r")]
    assert cursors == list(range(1, len(cursors) + 1))
    assert kinds(engine, "r").count(USER) == 1
    stale = new_event("step.completed", "1", {"name": "s"}, clock.time(), "stale")
    with pytest.raises(LeaseLost):  # a stale holder writes no event at all
        store.append(
            "r", run.fencing_token - 1, [rec.replace(position="1")][: len(records)], [stale]
        )
    assert len(all_events(engine, "r")) == 5


@pytest.mark.parametrize("count", [2, 3, 8, 9, 20])
def test_one_write_of_many_events_numbers_them_in_order_and_stores_repeats_once(
    engine: durably.Engine, clock: FakeClock, count: int
) -> None:
    # A step's write carries its two events and every emit since the last step: PostgreSQL
    # writes up to 8 of them as one VALUES list and more as arrays, so both sides of that
    # line are written here, each with repeats of events stored earlier mixed in.
    store = engine.store

    @engine.workflow()
    def idle(ctx: durably.Context) -> None:
        return None

    engine.start(idle, run_id="r")
    run = store.claim("r", other_owner(), 300, 10, lambda _: False)
    before = len(all_events(engine, "r"))

    def emits(first: int, n: int) -> list[Any]:
        return [
            new_event(USER, "0", {"i": i, "q": 'a "quoted" \\ text'}, clock.time(), f"e:{i}")
            for i in range(first, first + n)
        ]

    rec = StepRecord("0", "step", "s", "d" * 64, "ok", "1", started_at=1.0, finished_at=2.0)
    first = emits(0, count)
    assert store.append("r", run.fencing_token, [rec], first) is False
    # The same write again (its outcome was unknown): nothing new.
    store.append("r", run.fencing_token, [rec], first)
    assert [e.cursor for e in all_events(engine, "r")] == list(range(1, before + count + 1))
    # Events alone (a retry's), new ones among repeats: the new ones take the next
    # cursors in their order, no gap.
    store.append("r", run.fencing_token, [], [*first[::2], *emits(count, count), *first[1::2]])
    events = all_events(engine, "r")[before:]
    assert [e.cursor for e in events] == list(range(before + 1, before + 2 * count + 1))
    assert [e.data["i"] for e in events] == list(range(2 * count))
    assert all(e.data["q"] == 'a "quoted" \\ text' for e in events)
    assert [e.position for e in events] == ["0"] * (2 * count)
    # A record with new events and repeats in one write (the next step's).
    later = [*emits(2 * count, count), *first]
    store.append("r", run.fencing_token, [rec.replace(position="1")], later)
    events = all_events(engine, "r")[before:]
    assert [e.cursor for e in events] == list(range(before + 1, before + 3 * count + 1))
    assert [e.data["i"] for e in events] == list(range(3 * count))


def test_a_retry_is_committed_before_its_backoff_and_a_stale_one_refused(
    engine: durably.Engine,
) -> None:
    seen: list[list[str]] = []

    @durably.step(retries=2, backoff=0)
    def flaky() -> str:
        seen.append(kinds(engine, "r"))  # what any reader sees while this attempt runs
        if len(seen) == 1:
            raise Flaky("first try fails")
        return "ok"

    @engine.workflow()
    def wf(ctx: durably.Context) -> str:
        return ctx.step("flaky", flaky)

    assert engine.run(wf, run_id="r") == "ok"
    assert seen[1][-2:] == ["step.started", "step.retried"]  # attempt 2 sees attempt 1's
    retried = next(e for e in all_events(engine, "r") if e.kind == "step.retried").data
    assert (retried["attempt"], retried["attempts_max"]) == (1, 3)

    @engine.workflow()
    def taken(ctx: durably.Context) -> str:
        return ctx.step("flaky", flaky_then_taken)

    def flaky_then_taken() -> str:
        # Another process takes the run over while this attempt runs: its retry is refused.
        engine.store.claim("t", other_owner(), 300, 10, lambda _: True)
        raise Flaky("first try fails")

    with pytest.raises(StaleLease):  # the refused write latched the lease-lost stop
        engine.run(taken, run_id="t")
    assert "step.retried" not in kinds(engine, "t")


def test_follow_yields_a_live_run_in_sync_and_async(engine: durably.Engine) -> None:
    gate = threading.Event()

    @engine.workflow()
    def slow(ctx: durably.Context) -> int:
        ctx.step("wait", lambda: gate.wait(60))
        return 1

    handle = engine.start(slow, run_id="slow")
    follow = engine.follow("slow", poll_s=0.01)
    first = next(follow)
    assert first.kind == "run.created" and follow.cursor == 1
    worker = threading.Thread(target=engine.resume, args=("slow",))
    worker.start()
    gate.set()
    rest = list(follow)
    worker.join(60)
    assert handle.status() == "completed"
    assert [first, *rest] == all_events(engine, "slow")

    async def read() -> list[Event]:
        return [e async for e in engine.follow("slow", after=2, poll_s=0.01)]

    assert asyncio.run(read()) == all_events(engine, "slow")[2:]
