"""Budgets and the spend ledger (issue 12), on a real SQLite file and a fake clock.

The ledger counts real spend: one row per call that reported usage, committed before the
step's result; replayed steps add nothing. Crossing a budget raises BudgetExceeded at the
next position that goes live (the crossing step keeps its result), latched. Real crashes:
tests/crash/test_budget_crash.py; the store calls on both stores: tests/contract.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import durably
from durably.cli import main as cli
from durably.history import HALT


class Crash(BaseException):
    """Stands in for a process death inside one process (real deaths: tests/crash)."""


class RateLimitError(Exception):
    """What a model API raises when called too often."""


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'journal.db'}"


@pytest.fixture
def engine(url: str) -> Iterator[durably.Engine]:
    e = durably.Engine(url, clock=durably.FakeClock())
    yield e
    e.close()


def spent(e: durably.Engine, run_id: str) -> tuple[int, float, int]:
    s = e.spend(run_id)
    return s.tokens, round(s.cost_usd, 6), s.entries


def model(tokens: int, calls: list[str], name: str = "model") -> Any:
    def call(prompt: str) -> str:
        calls.append(name)
        durably.usage(tokens=tokens, cost_usd=tokens / 10_000)
        return f"{name}:{prompt}"

    return call


def test_crossing_raises_at_the_next_boundary_and_latches(engine: durably.Engine) -> None:
    calls: list[str] = []
    seen: list[str] = []

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> str:
        ctx.budget(tokens=1000)
        ctx.step("a", model(600, calls, "a"), "x")
        ctx.step("b", model(600, calls, "b"), "y")  # crosses: 1,200 > 1,000, still recorded
        try:
            ctx.step("c", model(10, calls, "c"), "z")
        except durably.BudgetExceeded as exc:
            seen.append(str(exc))
            for again in (lambda: ctx.step("d", model(1, calls, "d"), "w"), ctx.now):
                try:
                    again()
                except durably.BudgetExceeded:
                    seen.append("latched")
            raise
        return "done"

    with pytest.raises(durably.WorkflowFailed) as info:
        engine.run(w, run_id="r")
    assert calls == ["a", "b"]  # c and d never ran
    assert info.value.type_name == "durably.errors.BudgetExceeded"
    assert "1,200 tokens, more than its budget of 1,000" in info.value.message
    assert seen[1:] == ["latched", "latched"] and "durably fork r --at N" in seen[0]
    hist = engine.history("r")
    assert [(r.position, r.kind, r.status, r.usage_tokens) for r in hist] == [
        ("0", "step", "ok", 600),
        ("1", "step", "ok", 600),  # the crossing step's result is recorded
        ("2", HALT, "ok", None),
    ]
    assert spent(engine, "r") == (1200, 0.12, 2)
    run = engine.get_run("r")
    assert run.status == "failed" and run.error_type == "durably.errors.BudgetExceeded"

    # A retry replays up to the recorded halt and stops there again: nothing is called.
    engine.retry("r")
    with pytest.raises(durably.WorkflowFailed):
        engine.run(w, run_id="r")
    assert calls == ["a", "b"] and spent(engine, "r") == (1200, 0.12, 2)


def test_spend_equal_to_the_budget_is_within_it(engine: durably.Engine) -> None:
    calls: list[str] = []

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> str:
        ctx.budget(tokens=1000, cost_usd=0.1)
        ctx.step("a", model(1000, calls), "x")
        return str(ctx.step("b", lambda: "no usage"))

    assert engine.run(w, run_id="r") == "no usage"
    assert spent(engine, "r") == (1000, 0.1, 1)


def test_cost_limit_crosses_alone(engine: durably.Engine) -> None:
    calls: list[str] = []

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> str:
        ctx.budget(cost_usd=0.05)  # no token limit
        for i in range(5):
            ctx.step(f"s{i}", model(200, calls), str(i))  # $0.02 a call
        return "done"

    with pytest.raises(durably.WorkflowFailed) as info:
        engine.run(w, run_id="r")
    assert len(calls) == 3  # $0.06 after the third call: more than $0.05
    assert "$0.0600, more than its budget of $0.0500" in info.value.message


def test_the_ledger_counts_a_failed_attempt_that_was_retried(engine: durably.Engine) -> None:
    tries: list[int] = []

    @durably.step(retries=2, backoff=1.0)
    def flaky() -> str:
        tries.append(1)
        durably.usage(input_tokens=70, output_tokens=30, cost_usd=0.01)
        if len(tries) == 1:
            raise RateLimitError("429")
        return "ok"

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> str:
        return str(ctx.step("flaky", flaky))

    assert engine.run(w, run_id="r") == "ok"
    s = engine.store.get_spend("r")
    assert (s.tokens, s.input_tokens, s.output_tokens, s.entries) == (200, 140, 60, 2)
    [rec] = engine.history("r")
    assert (rec.attempts, rec.usage_tokens) == (2, 200)  # the record sums its attempts too


def test_a_failed_attempt_that_crosses_stops_the_retries(
    engine: durably.Engine,
) -> None:
    tries: list[int] = []

    @durably.step(retries=2, backoff=0.0)
    def flaky() -> str:
        tries.append(1)
        durably.usage(tokens=600)
        if len(tries) < 3:
            raise RateLimitError("429")
        return "ok"

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> str:
        ctx.budget(tokens=1000)
        ctx.step("flaky", flaky)
        return str(ctx.step("next", lambda: "never"))

    with pytest.raises(durably.WorkflowFailed, match="1,200 tokens, more than its budget of 1,000"):
        engine.run(w, run_id="r")
    # The crossing came at attempt 2 (a failure): the third attempt, which would spend past
    # the budget, never ran; the halt took the step's position.
    assert len(tries) == 2
    assert [(r.kind, r.status) for r in engine.history("r")] == [(HALT, "ok")]
    assert engine.store.get_spend("r").tokens == 1200  # both attempts counted


def test_replayed_steps_are_not_counted_and_a_repeated_call_is(engine: durably.Engine) -> None:
    calls: list[str] = []
    crash = {"at": "b"}

    def hook(run_id: str, pos: str, name: str, window: str) -> None:
        if name == crash["at"] and window == "effect":
            crash["at"] = ""
            raise Crash()

    engine.fault_hook = hook

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> str:
        ctx.step("a", model(100, calls, "a"), "x")
        ctx.step("b", model(200, calls, "b"), "y")
        return str(ctx.step("c", model(300, calls, "c"), "z"))

    with pytest.raises(Crash):
        engine.run(w, run_id="r")
    assert spent(engine, "r")[::2] == (300, 2)  # b's spend is in before its result
    assert engine.run(w, run_id="r") == "c:z"
    assert calls == ["a", "b", "b", "c"]
    assert spent(engine, "r")[::2] == (100 + 2 * 200 + 300, 4)


def test_budget_checked_at_claim_against_the_stored_spend(engine: durably.Engine) -> None:
    """A resume whose code now gives a lower budget than the spend so far: replayed steps
    still replay, and the halt lands at the first position that goes live."""
    calls: list[str] = []
    limit = {"tokens": 10_000}
    stop = {"after_b": True}

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> str:
        ctx.budget(tokens=limit["tokens"])
        ctx.step("a", model(400, calls, "a"), "x")
        ctx.step("b", model(400, calls, "b"), "y")
        if stop["after_b"]:
            raise Crash()
        return str(ctx.step("c", model(400, calls, "c"), "z"))

    with pytest.raises(Crash):
        engine.run(w, run_id="r")
    assert engine.store.get_spend("r").budget == durably.Budget(tokens=10_000)
    limit["tokens"], stop["after_b"] = 500, False
    with pytest.raises(durably.WorkflowFailed, match="800 tokens, more than its budget of 500"):
        engine.run(w, run_id="r")
    assert calls == ["a", "b"]
    assert [r.kind for r in engine.history("r")] == ["step", "step", HALT]
    assert engine.store.get_spend("r").budget == durably.Budget(tokens=500)  # latest wins


def test_the_latest_budget_call_wins_and_consumes_no_position(engine: durably.Engine) -> None:
    calls: list[str] = []

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> str:
        ctx.budget(tokens=100)
        ctx.budget(tokens=5000, cost_usd=1.0)  # the latest call wins: 400 tokens fit
        return str(ctx.step("a", model(400, calls), "x"))

    assert engine.run(w, run_id="r") == "model:x"
    assert [r.position for r in engine.history("r")] == ["0"]  # budget took no position
    assert engine.store.get_spend("r").budget == durably.Budget(tokens=5000, cost_usd=1.0)


def test_a_budget_set_again_on_replay_writes_nothing(engine: durably.Engine, url: str) -> None:
    import sqlite3

    calls: list[str] = []

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> str:
        ctx.budget(tokens=5000)
        ctx.step("a", model(400, calls), "x")
        if len(calls) == 1:
            raise Crash()
        return "done"

    with pytest.raises(Crash):
        engine.run(w, run_id="r")
    path = url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as c:
        first = c.execute("SELECT set_at FROM budgets").fetchall()
    engine.clock.advance(60)  # type: ignore[attr-defined]
    calls.append("resume")
    assert engine.run(w, run_id="r") == "done"
    with sqlite3.connect(path) as c:
        assert c.execute("SELECT set_at FROM budgets").fetchall() == first


def test_the_workflow_option_and_ctx_budget_over_it(engine: durably.Engine) -> None:
    calls: list[str] = []

    @engine.workflow(name="w", budget=durably.Budget(tokens=500))
    def w(ctx: durably.Context, raise_it: bool) -> str:
        if raise_it:
            ctx.budget(tokens=5000)
        ctx.step("a", model(400, calls), "x")
        ctx.step("b", model(400, calls), "y")
        return str(ctx.step("c", lambda: "end"))

    with pytest.raises(durably.WorkflowFailed, match="800 tokens, more than its budget of 500"):
        engine.run(w, False, run_id="opt")
    assert engine.store.get_spend("opt").budget == durably.Budget(tokens=500)
    assert engine.run(w, True, run_id="raised") == "end"
    assert engine.store.get_spend("raised").budget == durably.Budget(tokens=5000)


def test_async_workflow_crossing_and_gather(engine: durably.Engine) -> None:
    calls: list[str] = []

    async def amodel(prompt: str) -> str:
        calls.append(prompt)
        durably.usage(tokens=300)
        return prompt

    @engine.workflow(name="aw", budget=durably.Budget(tokens=1000))
    async def aw(ctx: durably.AsyncContext) -> str:
        await ctx.budget(tokens=800)
        assert await ctx.gather(ctx.step("p", amodel, "p"), ctx.step("q", amodel, "q")) == [
            "p",
            "q",
        ]
        await ctx.step("r", amodel, "r")  # 900 > 800 after it
        return str(await ctx.step("s", amodel, "s"))

    with pytest.raises(durably.WorkflowFailed) as info:
        asyncio.run(engine.run_async(aw, run_id="a"))
    assert "900 tokens, more than its budget of 800" in info.value.message
    assert sorted(calls) == ["p", "q", "r"]
    assert [r.kind for r in engine.history("a")][-1] == HALT
    assert spent(engine, "a")[::2] == (900, 3)


def test_compensations_still_record_after_the_budget_halt(engine: durably.Engine) -> None:
    calls: list[str] = []

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> str:
        ctx.budget(tokens=100)
        with ctx.saga() as saga:
            saga.step("book", model(150, calls, "book"), model(20, calls, "undo"), "x")
            saga.step("pay", model(1, calls, "pay"), model(1, calls, "refund"), "y")
        return "done"

    with pytest.raises(durably.WorkflowFailed, match="BudgetExceeded"):
        engine.run(w, run_id="r")
    assert calls == ["book", "undo"]
    assert [(r.position, r.name) for r in engine.history("r")] == [
        ("0", "book"),
        ("1", "durably.budget"),
        ("2", "durably.compensate"),
        ("3", "undo:book"),
    ]
    assert spent(engine, "r")[::2] == (170, 2)  # a compensation's spend is real spend too


def test_usage_fields_and_their_checks(engine: durably.Engine) -> None:
    def step() -> str:
        durably.usage(input_tokens=10, output_tokens=5, cost_usd=0.5)  # tokens: 15
        durably.usage(tokens=7)  # an old caller: no split
        durably.usage(100, 0.25)  # positional, as before
        durably.usage(tokens=3, input_tokens=1, output_tokens=1)  # tokens as given
        return "ok"

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> str:
        return str(ctx.step("s", step))

    assert engine.run(w, run_id="r") == "ok"
    s = engine.store.get_spend("r")
    assert (s.tokens, s.input_tokens, s.output_tokens) == (125, 11, 6)
    assert s.cost_usd == pytest.approx(0.75)
    for bad, says in [
        ({"tokens": -1}, "usage(tokens=...) must be from 0"),
        ({"tokens": 1.5}, "usage(tokens=...) must be a whole number of tokens"),
        ({"tokens": True}, "usage(tokens=...) must be a whole number"),
        ({"input_tokens": -3}, "usage(input_tokens=...)"),
        ({"output_tokens": "9"}, "usage(output_tokens=...)"),
        ({"cost_usd": math.nan}, "usage(cost_usd=...) must be a finite number"),
        ({"cost_usd": math.inf}, "usage(cost_usd=...) must be a finite number"),
        ({"cost_usd": -0.01}, "usage(cost_usd=...) must be a finite number from 0"),
    ]:
        with pytest.raises(durably.ConfigError, match=re.escape(says)):
            durably.usage(**bad)


def test_budget_values_are_checked(engine: durably.Engine) -> None:
    with pytest.raises(
        durably.ConfigError, match=re.escape("Budget(tokens=...) must be a whole number")
    ):
        durably.Budget(tokens=10.5)  # type: ignore[arg-type]
    with pytest.raises(durably.ConfigError, match="finite"):
        durably.Budget(cost_usd=math.inf)
    with pytest.raises(durably.ConfigError, match=re.escape("takes a durably.Budget(")):
        engine.workflow(name="x", budget={"tokens": 5})  # type: ignore[arg-type]

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> str:
        ctx.budget(tokens=-5)
        return "never"

    with pytest.raises(
        durably.ConfigError, match=re.escape("ctx.budget: Budget(tokens=...) must be from 0")
    ):
        engine.run(w, run_id="bad")
    assert engine.get_run("bad").status == "blocked"  # a bug in the code: fix, then retry


def test_runs_show_prints_spend_against_budget(engine: durably.Engine, url: str) -> None:
    calls: list[str] = []

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> str:
        ctx.budget(tokens=10_000, cost_usd=2.0)
        for i, n in enumerate((6000, 6400)):
            ctx.step(f"m{i}", model(n, calls), str(i))
        return str(ctx.step("end", lambda: "done"))

    with pytest.raises(durably.WorkflowFailed):
        engine.run(w, run_id="r")
    res = CliRunner().invoke(cli, ["runs", "show", "r", "--db", url])
    assert res.exit_code == 0, res.output
    assert "spend: tokens 12,400 of 10,000 (124%), cost $1.24 of $2.00 (62%)" in " ".join(
        res.output.split()
    )
    res = CliRunner().invoke(cli, ["runs", "show", "r", "--db", url, "--json"])
    import json

    spend = json.loads(res.output)["spend"]
    assert spend["tokens"] == 12_400 and spend["ledger_entries"] == 2
    assert spend["budget"] == {"tokens": 10_000, "cost_usd": 2.0}
    assert spend["budget_used"] == pytest.approx(1.24)


def test_replay_check_writes_no_budget_and_no_ledger(engine: durably.Engine, url: str) -> None:
    calls: list[str] = []

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> str:
        ctx.budget(tokens=5000)
        return str(ctx.step("a", model(10, calls), "x"))

    assert engine.run(w, run_id="r") == "model:x"
    from durably.replaycheck import check_runs

    report = check_runs(engine, [engine.get_run("r")])
    assert report.diverging == [] and calls == ["model"]
    assert spent(engine, "r")[::2] == (10, 1)


def test_a_workflow_that_returns_after_the_crossing_step_completes(
    engine: durably.Engine,
) -> None:
    """The halt waits for a position that goes live; a workflow with none left after the
    crossing step completes with that step's (paid-for) result, its overspend shown."""
    calls: list[str] = []

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> str:
        ctx.budget(tokens=100)
        return str(ctx.step("last", model(150, calls), "x"))

    assert engine.run(w, run_id="r") == "model:x"
    assert engine.get_run("r").status == "completed"
    assert spent(engine, "r")[::2] == (150, 1)


def test_engine_spend_of_an_unknown_run(engine: durably.Engine) -> None:
    with pytest.raises(durably.RunNotFound, match="nope"):
        engine.spend("nope")


def test_a_cancel_outranks_a_crossed_budget_not_yet_delivered(engine: durably.Engine) -> None:
    calls: list[str] = []

    def crossing() -> str:
        calls.append("cross")
        durably.usage(tokens=500)  # crosses: a BudgetExceeded halt is asked for
        # ... and a cancel arrives before the halt reached the workflow (engine.cancel
        # asks the core the same way, issue 11).
        cancel = durably.Cancelled("run 'r' was cancelled", "dup")
        engine._attempts.active["r"].core.request_halt(cancel)
        return "done"

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> str:
        ctx.budget(tokens=100)
        ctx.step("cross", crossing)
        return str(ctx.step("next", lambda: "never"))

    with pytest.raises(durably.DurablyError):
        engine.run(w, run_id="r")
    assert calls == ["cross"]
    assert [(r.kind, r.name) for r in engine.history("r")][-1] == (HALT, "durably.cancel")


def test_a_fork_past_the_budget_stop_is_refused(engine: durably.Engine) -> None:
    """A fork copying the recorded budget stop would end the same way at once: refused,
    naming the position (the one `runs why` names) to fork at instead."""

    def spend() -> str:
        durably.usage(tokens=600)
        return "ok"

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> str:
        ctx.budget(tokens=1000)
        ctx.step("a", spend)
        ctx.step("b", spend)
        ctx.step("c", spend)
        return "done"

    with pytest.raises(durably.WorkflowFailed):
        engine.run(w, run_id="r")
    assert [r.kind for r in engine.history("r")] == ["step", "step", HALT]
    with pytest.raises(durably.ConfigError, match="stopped by its budget at position 2"):
        engine.fork("r", at=3, new_run_id="r2")
    engine.fork("r", at=2, new_run_id="r3")


def test_usage_a_reconcile_reports_reaches_the_ledger(journal_url: str) -> None:
    """A reconcile that asks a model what happened spent it for real: its usage is
    charged (its own entry) beside the crashed attempt's, and counts against the budget."""
    crashes = {"left": 1}

    def crash_after_the_effect(run_id: str, pos: str, name: str, window: str) -> None:
        if (pos, window) == ("0", "effect") and crashes["left"]:
            crashes["left"] -= 1
            raise Crash("died after the effect, before its record")

    def lookup(key: str) -> str:
        durably.usage(tokens=300, cost_usd=0.03)  # it asked a model
        return "sent"

    @durably.step(reconcile=lookup)
    def send() -> str:
        durably.usage(tokens=1000, cost_usd=0.1)
        return "sent"

    clock = durably.FakeClock()
    with durably.Engine(journal_url, clock=clock, fault_hook=crash_after_the_effect) as e:

        @e.workflow(name="w")
        def w(ctx: durably.Context) -> str:
            ctx.budget(tokens=1200)
            out: str = ctx.step("send", send)
            ctx.step("after", lambda: "x")
            return out

        with pytest.raises(Crash):
            e.run(w, run_id="r")
        assert spent(e, "r") == (1000, 0.1, 1)
        # The reconcile's 300 tokens cross the budget: the next step does not run.
        with pytest.raises(durably.WorkflowFailed, match="BudgetExceeded"):
            e.run(w, run_id="r")
        assert spent(e, "r") == (1300, 0.13, 2)
        # The reconciled step is recorded, then the halt stops the run before "after".
        shape = [(r.name, r.status) for r in e.history("r")]
        assert shape == [("send", "ok"), ("durably.budget", "ok")]
