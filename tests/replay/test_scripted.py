"""The replay kernel and the capabilities' generators, driven by a scripted driver: no
store, no engine, no thread, no event loop.

Each test builds a kernel from a frozen RunSetup, runs one recording call as the
generator it is, checks every operation it yields and answers it by hand, then checks
what the call buffered for the journal. The same call replayed over those records must
yield no operation at all (STYLE habit: tests drive the state machine with data, no
sockets).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Generator
from typing import Any

import pytest

from durably.approvals import ApprovalRequest
from durably.clock import FakeClock
from durably.features import approvals, signals, timers, versions
from durably.history import (
    APPROVAL,
    OK,
    PATCHED,
    SIGNAL,
    SLEEP,
    STEP,
    WAITING,
    RunRecord,
    StepRecord,
)
from durably.replay import stepping
from durably.replay.kernel import RunCore
from durably.replay.ops import Call, Outcome, TakeSignal, Write
from durably.replay.park import Parked
from durably.replay.setup import RunSetup

Script = list[tuple[type, Callable[[Any], Any]]]


def drive(gen: Generator[Any, Any, Any], script: Script) -> Any:
    """Run ``gen`` to its end: each yielded operation must be the next scripted type, and
    the scripted reply (a function of the operation) is sent back."""
    reply: Any = None
    steps = iter(script)
    while True:
        try:
            op = gen.send(reply)
        except StopIteration as stop:
            assert next(steps, None) is None, "the call ended before the script did"
            return stop.value
        kind, answer = next(steps, (None, None))
        assert kind is not None, f"unscripted operation {op!r}"
        assert isinstance(op, kind), f"expected {kind.__name__}, got {op!r}"
        reply = answer(op)


def kernel(history: list[StepRecord] | None = None, clock: FakeClock | None = None) -> RunCore:
    """A kernel for run ``r`` over ``history``, built as the engine builds one."""
    return RunCore(RunSetup("r", history or [], clock or FakeClock(), incarnation="0" * 12))


def test_a_step_goes_live_then_replays_with_no_operation() -> None:
    core = kernel()
    calls: list[tuple[Any, ...]] = []

    def add(a: int, b: int) -> int:
        return a + b

    def call(op: Call) -> Outcome:
        calls.append(op.args)
        return Outcome(value=op.fn(*op.args, **op.kwargs))

    written: list[StepRecord] = []
    script: Script = [(Call, call), (Write, lambda op: written.extend(op.records))]
    assert drive(stepping.step(core, "add", add, (2, 3), {}), script) == 5
    assert calls == [(2, 3)]
    [rec] = written
    assert (rec.position, rec.kind, rec.name, rec.status, rec.output) == ("0", STEP, "add", OK, "5")

    again = kernel(written)
    assert drive(stepping.step(again, "add", add, (2, 3), {}), []) == 5  # no Call, no Write
    again.unconsumed_check()  # everything recorded was asked for again


def test_a_signal_wait_takes_the_signal_then_replays_it() -> None:
    core = kernel()
    taken: list[TakeSignal] = []

    def take(op: TakeSignal) -> tuple[int, str]:
        taken.append(op)
        return (7, '{"ok":true}')

    assert drive(signals.wait_for_signal(core, "go", None, None), [(TakeSignal, take)]) == {
        "ok": True
    }
    assert [(op.name, op.consumer) for op in taken] == [("go", "0")]
    [rec] = core.take_pending()
    assert (rec.kind, rec.status) == (SIGNAL, OK)

    again = kernel([rec])
    assert drive(signals.wait_for_signal(again, "go", None, None), []) == {"ok": True}


def test_a_signal_wait_with_nothing_sent_parks_with_a_typed_park() -> None:
    clock = FakeClock()
    core = kernel(clock=clock)
    with pytest.raises(Parked) as parked:
        drive(signals.wait_for_signal(core, "go", 60, "late"), [(TakeSignal, lambda op: None)])
    assert parked.value.reason == SIGNAL
    assert parked.value.wake_at == clock.time() + 60
    assert parked.value.wait_signals == ("go",)
    assert core.stopped is parked.value  # latched: nothing the workflow catches goes on
    [rec] = core.take_pending()
    assert (rec.kind, rec.status) == (SIGNAL, WAITING)

    clock.advance(61)  # past the recorded deadline: the replay times out to the default
    again = kernel([rec], clock)
    late = drive(signals.wait_for_signal(again, "go", 60, "late"), [(TakeSignal, lambda op: None)])
    assert late == "late"
    assert again.take_pending()[0].output == '{"timeout":true}'


def test_a_timer_parks_at_its_recorded_wake_time_and_ends_when_due() -> None:
    clock = FakeClock()
    core = kernel(clock=clock)
    with pytest.raises(Parked) as parked:
        timers.sleep(core, 30)
    assert (parked.value.reason, parked.value.wake_at) == ("timer", clock.time() + 30)
    [waiting] = core.take_pending()
    assert (waiting.kind, waiting.status) == (SLEEP, WAITING)

    clock.advance(5)  # not due yet: parks again at the same recorded time, writes nothing
    with pytest.raises(Parked) as again:
        timers.sleep(kernel([waiting], clock), 999)  # a timer reached before ignores its argument
    assert again.value.wake_at == parked.value.wake_at

    clock.advance(30)
    due = kernel([waiting], clock)
    timers.sleep(due, 999)
    [done] = due.take_pending()
    assert (done.status, done.started_at) == (OK, waiting.started_at)


def test_an_approval_request_parks_holding_its_record_for_the_park() -> None:
    core = kernel()
    with pytest.raises(Parked) as parked:
        drive(approvals.request_approval(core, "refund", {"usd": 5}, None, "reject"), [])
    [request] = parked.value.approvals
    assert isinstance(request, ApprovalRequest)
    assert (request.request_id, request.action) == ("0", "refund")
    [held] = parked.value.records
    assert isinstance(held, StepRecord)
    assert (held.kind, held.status) == (APPROVAL, WAITING)
    assert held in core.take_pending()  # the latched park releases it to its own write


def test_a_park_is_frozen() -> None:
    parked = Parked("timer", 1.0)
    with pytest.raises(AttributeError, match="frozen"):
        parked.records = ()  # type: ignore[misc]
    with pytest.raises(AttributeError, match="frozen"):
        parked.wake_at = 2.0  # type: ignore[misc]


def test_a_patch_marker_is_buffered_once_and_consumed_on_replay() -> None:
    core = kernel()
    assert versions.patched(core, "new-path") is True
    [marker] = core.take_pending()
    assert (marker.kind, marker.name, marker.output) == (PATCHED, "new-path", "true")
    assert marker.started_at == marker.finished_at  # one instant, as every marker

    replayed = kernel([marker])
    assert versions.patched(replayed, "new-path") is True
    assert replayed.take_pending() == []


def test_the_setup_is_built_from_the_run_alike_for_every_caller() -> None:
    run = RunRecord(
        run_id="r",
        workflow="w",
        version=None,
        prompt_version="p1",
        queue="default",
        input="[]",
        input_digest="0" * 64,
        codec_version=2,
        status="running",
        generation=3,
        fencing_token=9,
        incarnation="a" * 12,
        lease_expires_at=123.0,
    )
    live = RunSetup.for_run(run, [], FakeClock(), prompt_version="p2", fetch_blobs=None)
    check = RunSetup.for_run(
        run, [], FakeClock(), prompt_version="p2", fetch_blobs=None, checking=True
    )
    for setup in (live, check):
        assert (setup.token, setup.generation, setup.incarnation) == (9, 3, "a" * 12)
        assert setup.prompt_versions == ("p1", "p2")
    assert (live.lease_deadline, check.lease_deadline) == (123.0, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        live.token = 10  # type: ignore[misc]
    core = RunCore(live)
    assert (core.token, core.budgets.generation, core.lease_deadline) == (9, 3, 123.0)
