"""``durably runs why``: each row of docs/why.md, produced by a real run on both stores.

Every state here is reached through the engine's own paths (a step that really fails, a
deploy that really changes the code, a process death that really repeats until the run is
quarantined); the orphan after a real SIGKILL is in tests/crash/test_why_orphan.py. The
sentence is read through the real command (``durably runs why --json``).
"""

from __future__ import annotations

import datetime as dt
import json
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import durably
from durably.approvals import approval_digest
from durably.cli import main as cli
from durably.worker import Worker

from .live_runs import running


class Crash(BaseException):
    """Stands in for a process death inside one process (real deaths: tests/crash)."""


class RateLimitError(Exception):
    """What a model API raises when called too often."""


def why(url: str, run_id: str) -> dict[str, Any]:
    """``durably runs why RUN --json`` as data."""
    res = CliRunner().invoke(cli, ["runs", "why", run_id, "--db", url, "--json"])
    assert res.exit_code == 0, res.output
    data: dict[str, Any] = json.loads(res.output)
    return data


def why_text(url: str, run_id: str) -> str:
    res = CliRunner().invoke(cli, ["runs", "why", run_id, "--db", url])
    assert res.exit_code == 0, res.output
    return " ".join(res.output.split())  # rich wraps long lines


@pytest.fixture
def engine(journal_url: str) -> Iterator[durably.Engine]:
    e = durably.Engine(journal_url)
    yield e
    e.close()


def test_completed(engine: durably.Engine, journal_url: str) -> None:
    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> int:
        ctx.step("a", lambda: 1)
        return ctx.step("b", lambda: 2)

    engine.run(wf, run_id="done")
    got = why(journal_url, "done")
    assert got["state"] == "completed" and got["steps"] == 2
    assert re.fullmatch(
        r"completed at (\S+ )?\d\d:\d\d:\d\d UTC in \d+ s after 2 recorded steps;"
        r" nothing left to do",
        got["sentence"],
    )


def test_failed_at_a_step(engine: durably.Engine, journal_url: str) -> None:
    def charge() -> None:
        raise ValueError("card declined")

    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> None:
        ctx.step("plan", lambda: 1)
        ctx.step("charge", charge)

    with pytest.raises(durably.WorkflowFailed):
        engine.run(wf, run_id="f1")
    got = why(journal_url, "f1")
    assert got["state"] == "failed" and got["position"] == "1" and got["step"] == "charge"
    assert got["sentence"] == (
        "failed at step 1 charge: ValueError: card declined — `durably retry f1` re-opens it"
        " at that step"
    )
    engine.retry("f1")  # queued again: since the retry, not since its creation
    got = why(journal_url, "f1")
    run = engine.get_run("f1")
    assert got["state"] == "queued" and got["queued_at"] == run.updated_at > run.created_at


def test_failed_in_the_workflow_code(engine: durably.Engine, journal_url: str) -> None:
    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> None:
        ctx.step("plan", lambda: 1)
        raise KeyError("no such plan")

    with pytest.raises(durably.WorkflowFailed):
        engine.run(wf, run_id="f2")
    got = why(journal_url, "f2")
    assert got["state"] == "failed" and got["error_type"] == "KeyError"
    assert got["sentence"].startswith(
        "failed: the workflow raised KeyError: 'no such plan' after step 0 — `durably retry f2`"
    )


def test_failed_after_a_saga_compensated(engine: durably.Engine, journal_url: str) -> None:
    def charge(total: int) -> None:
        raise ValueError("card declined")

    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> None:
        ctx.step("plan", lambda: 1)
        with ctx.saga() as saga:
            saga.step("hotel", lambda city: city, lambda city: None, "Oslo")
            saga.step("charge", charge, lambda total: None, 100)

    with pytest.raises(durably.WorkflowFailed):
        engine.run(wf, run_id="f3")
    got = why(journal_url, "f3")
    assert got["state"] == "failed" and got["compensated"] == ["1"] and got["fork_at"] == 1
    assert got["sentence"] == (
        "failed: ValueError: card declined; a saga compensated it (undid the steps at 1) —"
        " `durably fork f3 --at 1` redoes the work under new keys"
    )


def test_blocked_by_nondeterminism(journal_url: str) -> None:
    old = durably.Engine(journal_url)

    @old.workflow(name="wf")
    def v1(ctx: durably.Context) -> None:
        ctx.step("plan", lambda: 1)
        ctx.step("open_ticket", _crash)

    with pytest.raises(Crash):
        old.run(v1, run_id="nd")
    old.close()
    new = durably.Engine(journal_url)  # a deploy renamed the first step

    @new.workflow(name="wf")
    def v2(ctx: durably.Context) -> None:
        ctx.step("make_plan", lambda: 1)

    with pytest.raises(durably.NonDeterminism):
        new.run(v2, run_id="nd")
    new.close()
    got = why(journal_url, "nd")
    assert got["state"] == "blocked" and got["blocked_by"] == "NonDeterminism"
    assert got["sentence"].startswith(
        "blocked: NonDeterminism at step 0: step 0: history has 'plan', code asked for"
        " 'make_plan' (steps differ)"
    )
    assert got["sentence"].endswith(
        "— deploy the old code, or patch it (`ctx.patched`), then run it again"
        " (`engine.resume('nd')`, or `durably retry nd` for a worker to take it)"
    )


def test_blocked_by_a_serialization_error(engine: durably.Engine, journal_url: str) -> None:
    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> object:
        ctx.step("plan", lambda: 1)
        return object()  # not storable: the run blocks, it does not fail

    with pytest.raises(durably.SerializationError):
        engine.run(wf, run_id="ser")
    got = why(journal_url, "ser")
    assert got["state"] == "blocked" and got["blocked_by"] == "SerializationError"
    assert got["sentence"].startswith("blocked: SerializationError: workflow 'wf' result:")
    assert got["sentence"].endswith(
        "— change the code to return and pass storable data, then run it again"
        " (`engine.resume('ser')`, or `durably retry ser` for a worker to take it)"
        " (recorded steps replay)"
    )


def test_blocked_by_a_config_error(engine: durably.Engine, journal_url: str) -> None:
    """A mistake in the code (here a naive datetime) is not called a SerializationError,
    and the advice is to fix what the reason names, not to return storable data."""

    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> None:
        ctx.step("plan", lambda: 1)
        ctx.sleep_until(dt.datetime(2030, 1, 1))  # naive: no timezone

    with pytest.raises(durably.ConfigError):
        engine.run(wf, run_id="cfg")
    got = why(journal_url, "cfg")
    assert got["state"] == "blocked" and got["blocked_by"] == "ConfigError"
    assert got["sentence"].startswith("blocked: ConfigError: ctx.sleep_until(2030-01-01T00:00:00)")
    assert got["sentence"].endswith(
        "— fix the code as the reason says, then run it again (`engine.resume('cfg')`, or"
        " `durably retry cfg` for a worker to take it) (recorded steps replay)"
    )
    assert "SerializationError" not in got["sentence"]


def _crash() -> None:
    raise Crash("the process dies here")


def test_quarantined_with_its_last_error(journal_url: str) -> None:
    engine = durably.Engine(journal_url, max_starts=2)

    def flaky() -> None:
        raise ConnectionError("upstream reset")

    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> None:
        try:
            ctx.step("fetch", flaky)
        except durably.StepFailed:
            pass
        ctx.step("dies", _crash)

    for _ in range(3):  # start 1 records the failure; starts 2 and 3 make no progress
        with pytest.raises(Crash):
            engine.run(wf, run_id="q1")
    with pytest.raises(durably.RunQuarantined):
        engine.run(wf, run_id="q1")
    engine.close()
    got = why(journal_url, "q1")
    assert got["state"] == "quarantined" and got["last_error_type"] == "ConnectionError"
    assert got["sentence"] == (
        "quarantined after 2 starts without progress; last error ConnectionError: upstream"
        " reset — fix the cause, then `durably retry q1`"
    )


def test_quarantined_without_an_error(journal_url: str) -> None:
    engine = durably.Engine(journal_url, max_starts=1)

    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> None:
        ctx.step("dies", _crash)

    with pytest.raises(Crash):
        engine.run(wf, run_id="q2")
    with pytest.raises(durably.RunQuarantined):
        engine.run(wf, run_id="q2")
    engine.close()
    got = why(journal_url, "q2")
    assert got["state"] == "quarantined" and got["last_error_type"] is None
    assert got["sentence"].startswith("quarantined after 1 start without progress; no error")
    assert "(its process died each time: a crash, OOM or SIGKILL)" in got["sentence"]


def test_in_doubt(engine: durably.Engine, journal_url: str) -> None:
    calls: list[str] = []

    @durably.step(effect=True)
    def charge(amount: int) -> str:
        calls.append("charged")
        if len(calls) == 1:
            raise Crash("died after charging, before recording")
        return "ok"

    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> str:
        ctx.step("plan", lambda: 1)
        return ctx.step("charge", charge, 100)

    with pytest.raises(Crash):
        engine.run(wf, run_id="doubt")
    with pytest.raises(durably.RunInDoubt):
        engine.run(wf, run_id="doubt")
    assert calls == ["charged"]  # never charged twice
    got = why(journal_url, "doubt")
    assert got["state"] == "in_doubt"
    assert got["sentence"].startswith(
        "in doubt: step 1 'charge' was in flight when its process died: its effect may or"
        " may not have happened, and it takes no idempotency_key and has no reconcile."
    )
    assert got["sentence"].endswith(
        "— inspect the target, then `durably retry doubt` or `durably skip doubt --output JSON`"
    )


def test_queued_with_runs_ahead_and_a_worker_serving_it(
    engine: durably.Engine, journal_url: str
) -> None:
    inside, release = threading.Event(), threading.Event()

    def hold() -> int:
        inside.set()
        assert release.wait(60)
        return 1

    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> int:
        return ctx.step("hold", hold)

    worker = Worker(engine, concurrency=1, queues=("q",), poll_interval_s=0.05, drain_s=5)
    thread = threading.Thread(target=worker.run)
    engine.start(wf, run_id="first", queue="q")
    thread.start()
    try:
        assert inside.wait(60)  # the worker holds "first"; the rest wait behind it
        for run_id in ("a", "b", "c"):
            engine.start(wf, run_id=run_id, queue="q")
        engine.start(wf, run_id="elsewhere", queue="other")  # another queue: not ahead
        got = why(journal_url, "c")
        assert got["state"] == "queued" and got["runs_ahead"] == 2
        assert got["workers"] == 1
        assert re.fullmatch(
            r"queued since (\S+ )?\d\d:\d\d:\d\d UTC on queue 'q', 2 runs ahead, 1 worker"
            r" serving it",
            got["sentence"],
        )
        alone = why(journal_url, "elsewhere")
        assert alone["runs_ahead"] == 0 and alone["workers"] == 0
        assert alone["sentence"].endswith(
            "0 runs ahead, no live worker serves it (start one: `durably worker MODULE:ENGINE"
            " --queue other`)"
        )
    finally:
        release.set()
        worker.stop()
        thread.join(60)


def test_running_at_an_effect_in_flight(engine: durably.Engine, journal_url: str) -> None:
    inside, release = threading.Event(), threading.Event()

    @durably.step(effect=True)
    def charge(amount: int, *, idempotency_key: str) -> str:
        inside.set()
        assert release.wait(60)
        return "ok"

    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> str:
        ctx.step("plan", lambda: 1)
        return ctx.step("charge", charge, 100)

    with running(engine, wf, "live", release):
        assert inside.wait(60)
        got = why(journal_url, "live")
    assert got["state"] == "running" and got["owner_pid"] is not None
    assert got["position"] == "1" and got["step"] == "charge" and got["attempt"] == 1
    assert re.fullmatch(
        r"running on pid \d+ at host \S+ \(lease until (\S+ )?\d\d:\d\d:\d\d UTC\), step 1 charge",
        got["sentence"],
    )


def cancel_cli(url: str, run_id: str, *extra: str) -> str:
    res = CliRunner().invoke(cli, ["cancel", run_id, "--db", url, *extra])
    assert res.exit_code == 0, res.output
    return " ".join(res.output.split())


def test_cancel_requested_while_running_then_cancelled(
    engine: durably.Engine, journal_url: str
) -> None:
    inside, release = threading.Event(), threading.Event()
    ran: list[str] = []

    @durably.step(effect=True)
    def charge(amount: int, *, idempotency_key: str) -> str:
        inside.set()
        assert release.wait(60)
        return "ok"

    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> str:
        ctx.step("plan", lambda: 1)
        ctx.step("charge", charge, 100)
        return ctx.step("ship", lambda: ran.append("ship") or "shipped")

    with running(engine, wf, "live", release):
        assert inside.wait(60)
        said = cancel_cli(journal_url, "live", "--reason", "duplicate alert")
        assert "will be cancelled: duplicate alert" in said and "unwinds at its next step" in said
        got = why(journal_url, "live")
    assert got["state"] == "cancel_requested" and got["cancel_reason"] == "duplicate alert"
    assert got["position"] == "1" and got["step"] == "charge" and got["owner_pid"] is not None
    assert re.fullmatch(
        r"cancel requested at (\S+ )?\d\d:\d\d:\d\d UTC: duplicate alert; unwinding: pid \d+ at"
        r" host \S+ stops it at its next step \(now step 1 charge\), then it ends cancelled",
        got["sentence"],
    )
    # The effect in flight completed under its key; the next step never ran.
    assert ran == []
    got = why(journal_url, "live")
    assert got["state"] == "cancelled" and got["unwound"] is True
    assert re.fullmatch(
        r"cancelled at (\S+ )?\d\d:\d\d:\d\d UTC: duplicate alert; it unwound from step 2;"
        r" nothing left to do",
        got["sentence"],
    )


def test_cancel_requested_while_parked_with_no_worker(
    engine: durably.Engine, journal_url: str
) -> None:
    # A parked run whose cancel woke it unwinds only when something takes it: with no
    # worker on its queue, say so (as for a due timer), or it waits forever unnoticed.
    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> object:
        return ctx.wait_for_signal("go")

    engine.start(wf, run_id="pc", queue="q2")
    with durably.Engine(journal_url, park_wait_s=0) as driver:
        driver.workflow(name="wf")(wf.fn)
        with pytest.raises(durably.RunParked):
            driver.resume("pc")
    cancel_cli(journal_url, "pc", "--reason", "dup")
    got = why(journal_url, "pc")
    assert got["state"] == "cancel_requested" and got["workers"] == 0
    assert got["sentence"].endswith(
        "then it ends cancelled; no live worker serves queue 'q2' (start one: `durably worker"
        " MODULE:ENGINE --queue q2`, or `engine.resume('pc')`)"
    )


def test_cancelled_at_once_while_queued(engine: durably.Engine, journal_url: str) -> None:
    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> int:
        return ctx.step("a", lambda: 1)

    engine.start(wf, run_id="q")
    said = cancel_cli(journal_url, "q", "--reason", "not needed")
    assert said.startswith("run q is cancelled: not needed (cancelled while queued")
    got = why(journal_url, "q")
    assert got["state"] == "cancelled" and got["unwound"] is False
    assert got["sentence"].startswith("cancelled at ") and got["sentence"].endswith(
        ": not needed; cancelled while queued: it had not started, so nothing ran;"
        " nothing left to do"
    )


def test_running_with_a_retrying_step(engine: durably.Engine, journal_url: str) -> None:
    inside, release = threading.Event(), threading.Event()
    attempts: list[int] = []

    @durably.step(retries=4, backoff=0)
    def call_model(prompt: str) -> str:
        attempts.append(1)
        if len(attempts) == 1:
            raise RateLimitError("429: slow down")
        inside.set()
        assert release.wait(60)
        return "answer"

    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> str:
        ctx.step("plan", lambda: 1)
        return ctx.step("call_model", call_model, "hi")

    with running(engine, wf, "live", release):
        assert inside.wait(60)
        got = why(journal_url, "live")
    assert got["state"] == "running" and got["owner_pid"] is not None
    assert got["position"] == "1" and got["step"] == "call_model" and got["attempt"] == 2
    assert got["attempts_max"] == 5  # retries=4: five attempts in all
    assert got["retry_error_type"].endswith("RateLimitError")
    assert re.fullmatch(
        r"running on pid \d+ at host \S+ \(lease until (\S+ )?\d\d:\d\d:\d\d UTC\), step 1"
        r" call_model, attempt 2 of 5 after \S*RateLimitError: 429: slow down",
        got["sentence"],
    )


def test_parked_on_a_timer(journal_url: str) -> None:
    engine = durably.Engine(journal_url, park_wait_s=0)

    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> None:
        ctx.step("plan", lambda: 1)
        ctx.sleep(3600)

    with pytest.raises(durably.RunParked):
        engine.run(wf, run_id="nap")
    got = why(journal_url, "nap")
    run = engine.get_run("nap")
    assert got["state"] == "parked" and got["waiting_for"] == "timer" and got["due"] is False
    assert got["wake_at"] == run.wake_at and got["reason"] == run.park_reason
    assert re.fullmatch(
        r"parked on a timer until (\S+ )?\d\d:\d\d:\d\d UTC \(in 60 min\); it holds no lease or"
        r" worker slot: an engine.run/resume waiting for it, or else a worker, resumes it when"
        r" due",
        got["sentence"],
    )
    engine.close()


def test_parked_on_a_due_timer_with_no_worker(journal_url: str) -> None:
    # Parked four hours ago (an injected clock) on a one-minute timer: due, not resumed.
    clock = durably.FakeClock(time.time() - 4 * 3600)
    engine = durably.Engine(journal_url, clock=clock, park_wait_s=0)

    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> None:
        ctx.sleep(60)

    with pytest.raises(durably.RunParked):
        engine.run(wf, run_id="late")
    got = why(journal_url, "late")
    assert got["state"] == "parked" and got["due"] is True and got["workers"] == 0
    assert re.fullmatch(
        r"parked on a timer that was due at (\S+ )?\d\d:\d\d:\d\d UTC \(4\.0 h ago\); no live"
        r" worker serves queue 'default' \(start one: `durably worker MODULE:ENGINE --queue"
        r" default`, or `engine.resume\('late'\)`\)",
        got["sentence"],
    ), got["sentence"]
    engine.close()


def test_journal_text_is_escaped(engine: durably.Engine, journal_url: str) -> None:
    def boom() -> None:
        raise ValueError("[bold red]x[/] \x1b[2J cleared")

    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> None:
        ctx.step("boom", boom)

    with pytest.raises(durably.WorkflowFailed):
        engine.run(wf, run_id="esc")
    text = why_text(journal_url, "esc")
    assert "[bold red]x[/]" in text and "\\x1b[2J" in text and "\x1b" not in text


def test_unknown_run_is_a_clear_error(engine: durably.Engine, journal_url: str) -> None:
    engine.close()
    res = CliRunner().invoke(cli, ["runs", "why", "nope", "--db", journal_url, "--json"])
    assert res.exit_code == 1
    assert "nope" in json.loads(res.output)["error"]


def test_no_journal_is_a_clear_error(tmp_path: Path) -> None:
    res = CliRunner().invoke(cli, ["runs", "why", "x", "--db", f"sqlite:///{tmp_path}/no.db"])
    assert res.exit_code == 1 and "no journal at" in res.output


def test_docs_table_lists_every_state_with_a_real_test() -> None:
    from durably import why as old_path
    from durably.inspect import why_sentences as why_module

    root = Path(__file__).parents[2]
    rows = [
        line.split(" | ")
        for line in (root / "docs" / "why.md").read_text().splitlines()
        if line.startswith("| `")
    ]
    states = [cells[0].removeprefix("| ").strip("`") for cells in rows]
    assert len(states) == len(set(states))  # one row per state
    assert set(states) == set(why_module.STATES)
    assert set(why_module._BUILDERS) <= set(why_module.STATES)
    assert old_path.STATES is why_module.STATES  # the old module path keeps working
    sources = (Path(__file__).read_text(), (root / "tests/crash/test_why_orphan.py").read_text())
    for cells in rows:
        for name in re.findall(r"`(test_\w+)`", cells[-1]):
            assert any(f"def {name}(" in src for src in sources), name


def test_parked_waiting_for_a_signal(journal_url: str) -> None:
    with durably.Engine(journal_url, park_wait_s=0) as engine:

        @engine.workflow(name="wf")
        def wf(ctx: durably.Context) -> Any:
            first = ctx.wait_for_signal("approve", timeout_s=3600)
            return [first, ctx.wait_for_signal("ship it")]

        with pytest.raises(durably.RunParked):
            engine.run(wf, run_id="waits")
        got = why(journal_url, "waits")
        assert got["state"] == "signal" and got["signal"] == "approve"
        assert got["deadline"] == pytest.approx(got["since"] + 3600)
        assert re.fullmatch(
            r"parked waiting for signal 'approve' since (\S+ )?\d\d:\d\d:\d\d UTC \(times out"
            r" at (\S+ )?\d\d:\d\d:\d\d UTC\); it holds no lease or worker slot — send it:"
            r" `durably signal waits approve --data JSON`",
            got["sentence"],
        ), got["sentence"]
        assert got["due"] is False
        engine.signal("waits", "approve", "yes")  # due now; no worker serves its queue
        got = why(journal_url, "waits")
        assert got["due"] is True and got["workers"] == 0
        assert re.fullmatch(
            r"parked on signal 'approve' since (\S+ )?\d\d:\d\d:\d\d UTC: signal 'approve'"
            r" arrived; no live worker serves queue 'default' \(start one: `durably worker"
            r" MODULE:ENGINE --queue default`, or `engine.resume\('waits'\)`\)",
            got["sentence"],
        ), got["sentence"]
        with pytest.raises(durably.RunParked):
            engine.resume("waits")  # now on the second wait, without a timeout
        got = why(journal_url, "waits")
        assert got["signal"] == "ship it" and got["deadline"] is None
        assert got["sentence"].endswith(
            "(no timeout); it holds no lease or worker slot — send it:"
            " `durably signal waits 'ship it' --data JSON`"
        )
        assert "signal 'ship it' since" in got["reason"]


def test_parked_on_several_waits_of_gather_branches(journal_url: str) -> None:
    with durably.Engine(journal_url, park_wait_s=0) as engine:

        @engine.workflow(name="wf")
        async def wf(ctx: durably.AsyncContext) -> Any:
            return await ctx.gather(
                ctx.sleep(3600), ctx.wait_for_signal("go"), ctx.request_approval("refund", {})
            )

        with pytest.raises(durably.RunParked):
            engine.run(wf, run_id="many")
        got = why(journal_url, "many")
        assert got["state"] == "waits" and got["due"] is False
        assert got["commands"] == [
            "durably signal many go --data JSON",
            f"durably approve many 0.2.0 --digest {approval_digest('refund', {})[:12]}",
        ]
        assert re.fullmatch(
            r"parked on several waits of ctx.gather branches at once \(3 waits: timer until"
            r" \S+; signal 'go' since .*\); the first due at (\S+ )?\d\d:\d\d:\d\d UTC;"
            r" any one of them wakes it \(then waits not satisfied park again\), and it holds"
            r" no lease or worker slot — `durably signal many go --data JSON`, `durably"
            r" approve many 0.2.0 --digest \w{12}`",
            got["sentence"],
        ), got["sentence"]
        engine.signal("many", "go", "1")
        got = why(journal_url, "many")
        assert got["due"] is True
        assert got["sentence"].endswith(
            ": one is due; no live worker serves queue 'default' (start one: `durably worker"
            " MODULE:ENGINE --queue default`, or `engine.resume('many')`)"
        ), got["sentence"]


def test_parked_on_a_signal_whose_timeout_passed(journal_url: str) -> None:
    with durably.Engine(journal_url, park_wait_s=0) as engine:

        @engine.workflow(name="wf")
        def wf(ctx: durably.Context) -> Any:
            # A second to park in: a loaded machine can take longer than a short timeout
            # between the wait and its park, and then the run goes on without parking.
            return ctx.wait_for_signal("approve", timeout_s=1.0, default="no answer")

        with pytest.raises(durably.RunParked):
            engine.run(wf, run_id="late")
        deadline = time.monotonic() + 30
        while (got := why(journal_url, "late"))["due"] is not True:
            assert time.monotonic() < deadline, got
            time.sleep(0.1)
        assert got["state"] == "signal" and got["due"] is True
        assert ": its timeout passed; no live worker serves queue 'default'" in got["sentence"]
        engine.park_wait_s = None
        assert engine.resume("late") == "no answer"


def test_budget_exceeded(engine: durably.Engine, journal_url: str) -> None:
    def call_model(prompt: str) -> str:
        durably.usage(tokens=6200, cost_usd=0.2)
        return prompt

    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> str:
        ctx.budget(tokens=10_000, cost_usd=0.5)
        ctx.step("plan", call_model, "a")
        ctx.step("draft", call_model, "b")  # 12,400 tokens: more than 10,000
        return str(ctx.step("review", call_model, "c"))

    with pytest.raises(durably.WorkflowFailed):
        engine.run(wf, run_id="spent")
    got = why(journal_url, "spent")
    assert got["state"] == "budget_exceeded" and got["position"] == "2"
    assert (got["spent_tokens"], got["budget_tokens"], got["budget_cost_usd"]) == (
        12_400,
        10_000,
        0.5,
    )
    assert got["sentence"] == (
        "stopped by its budget at step 2: tokens 12,400 of 10,000 (124%), cost $0.40 of"
        " $0.50 (80%) — its recorded steps are kept: raise the budget (ctx.budget or"
        " budget=), then `durably fork spent --at 2` goes on from there without paying for"
        " them again"
    )


def test_running_near_its_budget(engine: durably.Engine, journal_url: str) -> None:
    inside, release = threading.Event(), threading.Event()

    def call_model(tokens: int) -> int:
        durably.usage(tokens=tokens)
        if tokens == 1:
            inside.set()
            assert release.wait(60)
        return tokens

    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> int:
        ctx.budget(tokens=10_000)
        ctx.step("plan", call_model, 8_500)
        return ctx.step("draft", call_model, 1)

    with running(engine, wf, "near", release):
        assert inside.wait(60)
        got = why(journal_url, "near")
    assert got["state"] == "near_budget" and got["budget_used"] == 0.85
    assert re.fullmatch(
        r"running on pid \d+ at host \S+ \(lease until (\S+ )?\d\d:\d\d:\d\d UTC\), after step 0"
        r" plan, its last recorded step; near its budget: tokens 8,500 of 10,000 \(85%\),"
        r" cost \$0.00",
        got["sentence"],
    )


@pytest.mark.parametrize("steps", [0, 1])
def test_orphaned_after_a_recorded_step_or_before_any(journal_url: str, steps: int) -> None:
    # A run left `running` without an owner by an exception no code caught (SIGKILLed
    # runs: tests/crash/test_why_orphan.py), read through the real command.
    engine = durably.Engine(journal_url)

    def stop() -> None:
        raise Crash

    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> None:
        for _ in range(steps):
            ctx.step("plan", lambda: 1)
        ctx.step("act", stop)

    with pytest.raises(Crash):
        engine.run(wf, run_id="left")
    engine.close()
    got = why(journal_url, "left")
    where = "after step 0 plan, its last recorded step" if steps else "before its first step"
    assert got["state"] == "orphaned"
    assert got["sentence"].endswith(f"(or `durably recover` on that host); it was {where}")


def test_running_over_its_budget(engine: durably.Engine, journal_url: str) -> None:
    inside, release = threading.Event(), threading.Event()

    def call_model(prompt: str) -> str:
        durably.usage(tokens=12_000)  # crosses the budget; its result is still recorded
        return "answer"

    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> str:
        ctx.budget(tokens=10_000)
        ctx.step("call_model", call_model, "hi")
        inside.set()  # the workflow's own code runs on between steps
        assert release.wait(60)
        return ctx.step("next", call_model, "never")

    with running(engine, wf, "over", release):
        assert inside.wait(60)
        got = why(journal_url, "over")
    assert got["state"] == "over_budget" and got["spent_tokens"] == 12_000
    assert re.fullmatch(
        r"running on pid \d+ at host \S+ \(lease until (\S+ )?\d\d:\d\d:\d\d UTC\), after step 0"
        r" call_model, its last recorded step; over its budget: tokens 12,000 of 10,000"
        r" \(120%\), cost \$0.00 — it stops with BudgetExceeded at its next recording call",
        got["sentence"],
    ), got["sentence"]


def test_parked_waiting_for_an_approval(journal_url: str) -> None:
    with durably.Engine(journal_url, park_wait_s=0) as engine:

        @engine.workflow(name="wf")
        def wf(ctx: durably.Context) -> Any:
            ctx.step("plan", lambda: 1)
            first = ctx.request_approval("refund", {"amount": 20}, timeout_s=3600)
            return [first.outcome, ctx.request_approval("close ticket", {"id": 7}).outcome]

        with pytest.raises(durably.RunParked):
            engine.run(wf, run_id="asks")
        got = why(journal_url, "asks")
        [pending] = engine.pending_approvals("asks")
        assert got["state"] == "approval" and got["action"] == "refund"
        assert got["request_id"] == "1" and got["digest"] == pending.digest
        assert got["expires_at"] == pytest.approx(got["since"] + 3600)
        prefix = pending.digest[:12]
        assert re.fullmatch(
            rf"parked waiting for approval of 'refund' \(request 1, digest {prefix}\) since"
            r" (\S+ )?\d\d:\d\d:\d\d UTC \(expires at (\S+ )?\d\d:\d\d:\d\d UTC\); it holds"
            r" no lease or worker slot — approve it: `durably approve asks 1 --digest"
            rf" {prefix}` \(or `durably reject ... --reason TEXT`\)",
            got["sentence"],
        ), got["sentence"]
        assert got["due"] is False
        # The command it prints works as printed; the run is then due, no worker serves it.
        res = CliRunner().invoke(cli, [*got["command"].split()[1:], "--db", journal_url])
        assert res.exit_code == 0, res.output
        got = why(journal_url, "asks")
        assert got["due"] is True and got["workers"] == 0
        assert got["sentence"] == (
            "parked on approval of 'refund' (request 1): it was decided; no live worker serves"
            " queue 'default' (start one: `durably worker MODULE:ENGINE --queue default`, or"
            " `engine.resume('asks')`)"
        )
        with pytest.raises(durably.RunParked):
            engine.resume("asks")  # now on the second request, without an expiry
        got = why(journal_url, "asks")
        assert got["action"] == "close ticket" and got["expires_at"] is None
        assert "(no expiry)" in got["sentence"]
        assert "`durably approve asks 2 --digest " in got["sentence"]


def test_running_after_a_long_streamed_call(
    engine: durably.Engine, journal_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A streamed call's deltas are many and say nothing ``why`` reads: they must not fill
    its bound on events read, or the retry after them (the step in flight) goes unseen."""
    from durably.inspect import why_facts

    monkeypatch.setattr(why_facts, "EVENTS_SCAN_MAX", 30)
    inside, release = threading.Event(), threading.Event()
    attempts: list[int] = []

    @durably.step(retries=1, backoff=0)
    def call_model(prompt: str) -> str:
        attempts.append(1)
        if len(attempts) == 1:
            raise RateLimitError("429: slow down")
        inside.set()
        assert release.wait(60)
        return "answer"

    def tokens() -> Iterator[str]:
        yield from (f"t{i}" for i in range(60))

    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> str:
        with ctx.step_stream("draft", tokens, deltas=lambda c: [{"text": c}]) as s:
            "".join(s)
        return ctx.step("call_model", call_model, "hi")

    with running(engine, wf, "streamed", release):
        assert inside.wait(60)
        assert engine.store.flush_stream(10)
        got = why(journal_url, "streamed")
    assert got["step"] == "call_model" and got["attempt"] == 2, got
    assert got["retry_error_type"].endswith("RateLimitError")
