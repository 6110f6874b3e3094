"""Messages a first user meets when following the docs: each says what happened and
what to do, on both stores (found by trying the documented examples as a new user)."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import durably


@pytest.fixture
def engine(journal_url: str) -> Iterator[durably.Engine]:
    e = durably.Engine(journal_url, park_wait_s=0)
    yield e
    e.close()


def _refund(engine: durably.Engine) -> durably.PendingApproval:
    @engine.workflow(name="refund")
    def refund(ctx: durably.Context, order: dict[str, object]) -> str:
        d = ctx.request_approval("refund", {"order": order["id"], "amount": order["amount"]})
        return d.outcome

    with pytest.raises(durably.RunParked):
        engine.run(refund, {"id": "o-1", "amount": 20}, run_id="r1")
    (pending,) = engine.pending_approvals("r1")
    return pending


def test_a_prefix_of_the_right_digest_is_not_called_another_action(
    engine: durably.Engine,
) -> None:
    p = _refund(engine)
    with pytest.raises(durably.ApprovalMismatch) as err:
        engine.approve("r1", p.request_id, digest=p.digest[:12])
    text = str(err.value)
    assert "names another action" not in text
    assert "not given as the request's full lowercase digest" in text
    assert "the API takes the full 64-hex digest" in text
    with pytest.raises(durably.ApprovalMismatch, match="names another action"):
        engine.approve("r1", p.request_id, digest="0" * 64)  # a truly other digest


def test_a_decision_without_a_name_is_not_attributed_to_someone_named_someone(
    engine: durably.Engine,
) -> None:
    p = _refund(engine)
    engine.approve("r1", p.request_id, digest=p.digest)  # no by=
    with pytest.raises(durably.ApprovalAlreadyDecided) as err:
        engine.reject("r1", p.request_id, digest=p.digest, by="bob", reason="no")
    assert "by someone who gave no name" in str(err.value)
    assert "'someone'" not in str(err.value)


def test_cancel_of_an_unknown_run_says_what_to_check(engine: durably.Engine) -> None:
    with pytest.raises(durably.RunNotFound) as err:
        engine.cancel("nope", reason="dup")
    assert re.search(r"nothing was cancelled\. Check the run id \(`durably runs list`", str(err))


def test_a_signal_that_cannot_be_encoded_reads_as_one_sentence(engine: durably.Engine) -> None:
    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> object:
        return ctx.wait_for_signal("go")

    with pytest.raises(durably.RunParked):
        engine.run(w, run_id="s1")
    with pytest.raises(durably.SerializationError) as err:
        engine.signal("s1", "go", object())
    assert ".." not in str(err.value)
    assert str(err.value).endswith(". Nothing was sent to run 's1'")


def test_budget_exceeded_points_at_where_to_find_the_fork_position(
    engine: durably.Engine,
) -> None:
    def model() -> str:
        durably.usage(tokens=600)
        return "text"

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> list[str]:
        ctx.budget(tokens=1_000)
        return [ctx.step("model", model) for _ in range(3)]

    with pytest.raises(durably.WorkflowFailed) as err:
        engine.run(w, run_id="b1")
    assert "`durably fork b1 --at N`, N the position it stopped at" in str(err.value)
    assert "`durably runs why b1` names it" in str(err.value)


def test_an_approval_park_reason_reads_like_the_timer_and_signal_ones(
    engine: durably.Engine,
) -> None:
    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> str:
        ctx.wait_for_signal("go", timeout_s=60)
        return ctx.request_approval("ship", {"n": 1}, timeout_s=60).outcome

    with pytest.raises(durably.RunParked):
        engine.run(w, run_id="p1")
    signal_reason = engine.get_run("p1").park_reason
    assert signal_reason is not None
    assert re.fullmatch(r"signal 'go' since \S+Z \(times out at \S+Z\)", signal_reason), (
        signal_reason
    )
    engine.signal("p1", "go")
    with pytest.raises(durably.RunParked):
        engine.run(w, run_id="p1")
    reason = engine.get_run("p1").park_reason
    assert reason is not None
    assert re.fullmatch(
        r"approval 'ship' \([0-9a-f]{12}\) since \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"
        r" \(expires at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\)",
        reason,
    ), reason


@pytest.mark.parametrize("use_async", [False, True])
def test_engine_run_follows_a_worker_that_claimed_its_new_run_first(
    journal_url: str, use_async: bool
) -> None:
    # engine.run creates the run queued, then claims it: a worker serving the same
    # workflow may claim it in between. engine.run raised RunLeased for the run it had
    # just created; like a worker taking a parked run when due, it follows it instead.
    release = threading.Event()

    def slow() -> str:
        release.wait(10)
        return "done"

    def register(e: durably.Engine) -> Any:
        @e.workflow(name="wf")
        def wf(ctx: durably.Context) -> str:
            return ctx.step("s", slow)

        return wf

    with durably.Engine(journal_url) as caller, durably.Engine(journal_url) as worker:
        wf = register(caller)
        register(worker)
        create = caller.store.create_run
        drivers: list[threading.Thread] = []

        def create_then_lose_the_race(new: Any) -> Any:
            out = create(new)
            t = threading.Thread(target=worker.resume, args=(new.run_id,))
            t.start()
            drivers.append(t)
            while caller.get_run(new.run_id).status != "running":  # the worker holds it
                time.sleep(0.01)
            threading.Timer(0.3, release.set).start()
            return out

        caller.store.create_run = create_then_lose_the_race  # type: ignore[method-assign]
        if use_async:
            got = asyncio.run(caller.run_async(wf, run_id="r"))
        else:
            got = caller.run(wf, run_id="r")
        assert got == "done"
        assert caller.get_run("r").starts == 1  # driven once, by the worker
        for t in drivers:
            t.join(10)


def test_a_second_cancel_says_the_first_reason_stands(
    engine: durably.Engine, journal_url: str
) -> None:
    from click.testing import CliRunner

    from durably.cli import main as cli

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> object:
        return ctx.wait_for_signal("go")

    engine.start(w, run_id="c1", queue="nobody")
    with durably.Engine(journal_url, park_wait_s=0) as driver:
        driver.workflow(name="w")(w.fn)
        with pytest.raises(durably.RunParked):
            driver.resume("c1")

    def cancel(reason: str) -> str:
        res = CliRunner().invoke(cli, ["cancel", "c1", "--db", journal_url, "--reason", reason])
        assert res.exit_code == 0, res.output
        return " ".join(res.output.split())

    assert cancel("dup").startswith("run c1 will be cancelled: dup: it is parked")
    said = cancel("another reason")
    assert said.startswith(
        "a cancel of run c1 was already asked for: dup; nothing changed (the first reason"
        " stays): it is parked"
    ), said
    assert engine.get_run("c1").cancel_reason == "dup"


@pytest.mark.parametrize(
    ("call", "says"),
    [
        (lambda ctx: ctx.wait_for_signal("go", timeout_s=-5), r"ctx\.wait_for_signal\('go'\)"),
        (lambda ctx: ctx.budget(tokens=-1), r"ctx\.budget: "),
    ],
)
def test_a_bad_argument_says_the_run_is_blocked_and_what_to_do(
    engine: durably.Engine, call: Any, says: str
) -> None:
    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> object:
        return call(ctx)

    with pytest.raises(durably.ConfigError, match=says) as err:
        engine.run(w, run_id="bad")
    assert str(err.value).endswith("The run is blocked; fix the code, then resume it.")
    assert engine.get_run("bad").status == "blocked"
