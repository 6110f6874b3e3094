"""A fork never carries a decision (docs/api.md, "Recovery"): a decided approval request
below the fork point is not copied, and neither is anything after it, so the fork's
request parks for a new decision by a person. On both stores, with the refunds counted
in a separate SQLite "world" database, as a receiving system would count them."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import durably
from durably.cli import main as cli

ARGS = {"order": "A-17", "cents": 500}


@pytest.fixture
def engine(journal_url: str) -> Iterator[durably.Engine]:
    # park_wait_s=0: engine.run returns RunParked at once instead of waiting in-process.
    with durably.Engine(journal_url, park_wait_s=0) as e:
        yield e


class World:
    """The payment system: one row per refund it performed, keyed like a real one."""

    def __init__(self, path: Path) -> None:
        self.path = path
        with sqlite3.connect(path) as db:
            db.execute("CREATE TABLE refunds (key TEXT PRIMARY KEY, order_id TEXT)")

    def refund(self, order: str, *, idempotency_key: str) -> str:
        with sqlite3.connect(self.path) as db:
            db.execute("INSERT OR IGNORE INTO refunds VALUES (?, ?)", (idempotency_key, order))
        return f"refunded {order}"

    def count(self) -> int:
        with sqlite3.connect(self.path) as db:
            n: int = db.execute("SELECT count(*) FROM refunds").fetchone()[0]
        return n


def refund_flow(engine: durably.Engine, world: World) -> Any:
    @engine.workflow(name="refund")
    def flow(ctx: durably.Context, args: dict[str, Any]) -> dict[str, Any]:
        decision = ctx.request_approval("refund", args)  # position 0
        if not decision.approved:
            return {"refunded": False, "by": decision.by}
        ctx.step("refund", world.refund, args["order"])  # position 1
        ctx.step("notify", lambda: "mailed")  # position 2
        return {"refunded": True, "by": decision.by}

    return flow


def approved_and_refunded(engine: durably.Engine, world: World) -> Any:
    """Run ``orig`` to its end: approved by ana, refunded once."""
    flow = refund_flow(engine, world)
    with pytest.raises(durably.RunParked):
        engine.run(flow, ARGS, run_id="orig")
    [req] = engine.pending_approvals()
    engine.approve("orig", req.request_id, digest=req.digest, by="ana")
    assert engine.run(flow, ARGS, run_id="orig") == {"refunded": True, "by": "ana"}
    assert world.count() == 1
    return flow


@pytest.mark.parametrize("at", [1, 2, 3])
def test_a_fork_past_an_approval_parks_for_a_new_decision(
    engine: durably.Engine, tmp_path: Path, at: int
) -> None:
    world = World(tmp_path / "world.db")
    flow = approved_and_refunded(engine, world)
    handle = engine.fork("orig", at=at, new_run_id="fork")
    with contextlib.suppress(durably.RunParked):
        engine.run(flow, ARGS, run_id="fork")
    assert world.count() == 1  # no second refund without a new approval
    assert handle.status() == "parked"
    # Nothing of the decision, nor of what followed it, is in the fork's journal.
    assert [r.status for r in engine.history("fork")] == ["waiting"]
    [req] = engine.pending_approvals("fork")
    assert (req.action, req.args, req.request_id) == ("refund", ARGS, "0")
    # Nobody's earlier decision names the fork: the person who approves it now does.
    engine.reject("fork", req.request_id, digest=req.digest, by="bob", reason="already done")
    assert engine.run(flow, ARGS, run_id="fork") == {"refunded": False, "by": "bob"}
    assert world.count() == 1
    assert engine.get_run("orig").status == "completed"  # the original is not changed


def test_a_fork_approved_again_refunds_under_its_own_key(
    engine: durably.Engine, tmp_path: Path
) -> None:
    world = World(tmp_path / "world.db")
    flow = approved_and_refunded(engine, world)
    engine.fork("orig", at=2, new_run_id="fork")
    with pytest.raises(durably.RunParked):
        engine.run(flow, ARGS, run_id="fork")
    [req] = engine.pending_approvals("fork")
    engine.approve("fork", req.request_id, digest=req.digest, by="bob")
    assert engine.run(flow, ARGS, run_id="fork") == {"refunded": True, "by": "bob"}
    assert world.count() == 2  # two refunds, two approvals
    decision = json.loads(engine.history("fork")[0].output or "null")
    assert decision["by"] == "bob"


def test_a_fork_copies_what_came_before_the_decision(
    engine: durably.Engine, tmp_path: Path
) -> None:
    world = World(tmp_path / "world.db")
    planned: list[str] = []

    @engine.workflow(name="planned")
    def flow(ctx: durably.Context, args: dict[str, Any]) -> str:
        ctx.step("plan", lambda: planned.append("plan"))  # 0: a paid model call
        decision = ctx.request_approval("refund", args)  # 1
        if decision.approved:
            ctx.step("refund", world.refund, args["order"])  # 2
        return "done"

    with pytest.raises(durably.RunParked):
        engine.run(flow, ARGS, run_id="orig")
    [req] = engine.pending_approvals()
    engine.approve("orig", req.request_id, digest=req.digest, by="ana")
    engine.run(flow, ARGS, run_id="orig")
    engine.fork("orig", at=3, new_run_id="fork")
    assert [r.position for r in engine.history("fork")] == ["0"]
    with pytest.raises(durably.RunParked):
        engine.run(flow, ARGS, run_id="fork")
    assert (planned, world.count()) == (["plan"], 1)
    assert [p.request_id for p in engine.pending_approvals("fork")] == ["1"]


def test_a_fork_never_copies_an_expired_decision(journal_url: str) -> None:
    clock = durably.FakeClock()
    with durably.Engine(journal_url, clock=clock, park_wait_s=0) as engine:

        @engine.workflow(name="expiring")
        def flow(ctx: durably.Context) -> str:
            decision = ctx.request_approval("refund", ARGS, timeout_s=60)  # 0
            ctx.step("after", lambda: decision.outcome)  # 1
            return decision.outcome

        with pytest.raises(durably.RunParked):
            engine.run(flow, run_id="orig")
        clock.advance(61)
        assert engine.run(flow, run_id="orig") == "expired"
        engine.fork("orig", at=2, new_run_id="fork")
        assert engine.history("fork") == []
        with pytest.raises(durably.RunParked):
            engine.run(flow, run_id="fork")  # a fresh request, with a fresh timeout
        [req] = engine.pending_approvals("fork")
        assert req.expires_at is not None
        assert req.expires_at.timestamp() == pytest.approx(clock.time() + 60)


def test_a_fork_never_copies_a_decision_taken_inside_a_gather(
    engine: durably.Engine, tmp_path: Path
) -> None:
    world = World(tmp_path / "world.db")
    looked: list[str] = []

    @engine.workflow(name="gathered")
    async def flow(ctx: durably.AsyncContext, args: dict[str, Any]) -> str:
        async def lookup() -> str:
            return str(await ctx.step("lookup", lambda: looked.append("x") or "found"))

        decision, _ = await ctx.gather(ctx.request_approval("refund", args), lookup())  # 0
        if decision.approved:
            await ctx.step("refund", world.refund, args["order"])  # 1
        return "done"

    with pytest.raises(durably.RunParked):
        engine.run(flow, ARGS, run_id="orig")
    [req] = engine.pending_approvals()
    engine.approve("orig", req.request_id, digest=req.digest, by="ana")
    assert engine.run(flow, ARGS, run_id="orig") == "done"
    engine.fork("orig", at=2, new_run_id="fork")
    assert engine.history("fork") == []  # the whole gather goes live again
    with contextlib.suppress(durably.RunParked):
        engine.run(flow, ARGS, run_id="fork")
    assert world.count() == 1
    assert [p.request_id for p in engine.pending_approvals("fork")] == ["0.0.0"]


def test_cli_fork_says_where_the_fork_goes_live(
    engine: durably.Engine, journal_url: str, tmp_path: Path
) -> None:
    world = World(tmp_path / "world.db")
    approved_and_refunded(engine, world)
    runner = CliRunner()
    out = runner.invoke(cli, ["fork", "orig", "--at", "2", "--run-id", "f1", "--db", journal_url])
    assert out.exit_code == 0, out.output
    assert "Position 0 holds a decided approval request" in out.output
    assert "from 0 on it runs live" in out.output
    data = runner.invoke(
        cli, ["fork", "orig", "--at", "2", "--run-id", "f2", "--json", "--db", journal_url]
    )
    assert data.exit_code == 0, data.output
    assert (json.loads(data.output)["at"], json.loads(data.output)["live_from"]) == (2, 0)


def test_cli_fork_names_the_signals_it_copies(
    engine: durably.Engine, journal_url: str, tmp_path: Path
) -> None:
    # A signal is data delivered to a run (DESIGN: only decided approvals are not
    # copied), so a fork past a wait copies what it took and does not wait again. Gated
    # on a signal named "approve", that repeats the refund with nobody approving: the
    # fork's message names each signal it copies, so the person forking sees it.
    world = World(tmp_path / "world.db")

    @engine.workflow(name="signalled")
    def flow(ctx: durably.Context) -> str:
        ctx.wait_for_signal("approve")  # position 0
        ctx.step("refund", world.refund, "A-17")  # position 1
        return "done"

    with pytest.raises(durably.RunParked):
        engine.run(flow, run_id="orig")
    engine.signal("orig", "approve", {"by": "ana"})
    assert engine.run(flow, run_id="orig") == "done"
    runner = CliRunner()
    out = runner.invoke(cli, ["fork", "orig", "--at", "1", "--run-id", "f1", "--db", journal_url])
    assert out.exit_code == 0, out.output
    assert "copies what the signal wait(s) 'approve' at 0 took" in out.output
    assert "ctx.request_approval" in out.output
    data = runner.invoke(
        cli, ["fork", "orig", "--at", "1", "--run-id", "f2", "--json", "--db", journal_url]
    )
    assert data.exit_code == 0, data.output
    assert json.loads(data.output)["signals_copied"] == [{"position": "0", "name": "approve"}]
    none = runner.invoke(
        cli, ["fork", "orig", "--at", "0", "--run-id", "f3", "--json", "--db", journal_url]
    )
    assert json.loads(none.output)["signals_copied"] == []
