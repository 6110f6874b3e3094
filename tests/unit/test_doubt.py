"""Effects in doubt: intents, reconcile, parking in_doubt, and a person's retry or skip."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import durably
from durably.cli import main as cli


class Crash(BaseException):
    """Stands in for a process death inside one process (real deaths: tests/crash)."""


class World:
    """A receiving system without keys: it can only be asked what it already has."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.by_key: dict[str, str] = {}


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'j.db'}"


def crash_at(position: str, window: str) -> Any:
    armed = {"on": True}

    def hook(run_id: str, pos: str, name: str, win: str) -> None:
        if armed["on"] and (pos, win) == (position, window):
            armed["on"] = False
            raise Crash(f"{pos}:{win}")

    return hook


def build(engine: durably.Engine, world: World, **opts: Any) -> durably.Workflow:
    @durably.step(effect=True, **opts)
    def send_email(to: str) -> str:
        world.sent.append(to)
        msg_id = f"msg-{len(world.sent)}"
        return msg_id

    @engine.workflow(name="mail")
    def mail(ctx: durably.Context) -> str:
        ctx.step("plan", lambda: "p")
        return ctx.step("send_email", send_email, "finance@example.com")

    return mail


@pytest.fixture
def engine(db: str) -> Iterator[durably.Engine]:
    e = durably.Engine(db, fault_hook=crash_at("1", "effect"))
    yield e
    e.close()


def test_unkeyed_effect_parks_in_doubt_and_skip_records_it(engine: durably.Engine) -> None:
    world = World()
    mail = build(engine, world)
    with pytest.raises(Crash):
        engine.run(mail, run_id="r")
    with pytest.raises(durably.RunInDoubt, match=r"'send_email'.*durably retry r"):
        engine.run(mail, run_id="r")
    assert engine.get_run("r").status == "in_doubt" and world.sent == ["finance@example.com"]
    with pytest.raises(durably.RunInDoubt):  # stays parked: not retried blindly
        engine.run(mail, run_id="r")
    engine.skip("r", "msg-1")
    assert engine.run(mail, run_id="r") == "msg-1"
    assert world.sent == ["finance@example.com"]


def test_retry_runs_the_step_in_doubt_again(engine: durably.Engine) -> None:
    world = World()
    mail = build(engine, world)
    with pytest.raises(Crash):
        engine.run(mail, run_id="r")
    with pytest.raises(durably.RunInDoubt):
        engine.run(mail, run_id="r")
    run = engine.retry("r")
    assert run.status == "queued"
    assert engine.run(mail, run_id="r") == "msg-2"
    assert len(world.sent) == 2  # a person chose this


def test_on_doubt_retry(engine: durably.Engine) -> None:
    world = World()
    mail = build(engine, world, on_doubt="retry")
    with pytest.raises(Crash):
        engine.run(mail, run_id="r")
    assert engine.run(mail, run_id="r") == "msg-2"


def test_reconcile_records_what_the_world_says(db: str) -> None:
    world = World()
    lookups: list[str] = []

    def lookup(key: str) -> Any:
        lookups.append(key)
        return world.by_key.get(key, durably.NOT_DONE)

    engine = durably.Engine(db, fault_hook=crash_at("1", "effect"))

    @durably.step(reconcile=lookup)
    def send(to: str) -> str:
        world.sent.append(to)
        key = engine.get_run("r").key("1")
        world.by_key[key] = f"msg-{len(world.sent)}"  # the world remembers what it did
        return world.by_key[key]

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> str:
        ctx.step("plan", lambda: "p")
        return ctx.step("send", send, "x")

    with pytest.raises(Crash):
        engine.run(w, run_id="r")
    assert engine.run(w, run_id="r") == "msg-1"
    assert lookups == [engine.get_run("r").key("1")] and world.sent == ["x"]
    engine.close()


def test_reconcile_not_done_runs_the_step(db: str) -> None:
    world = World()
    crash = {"on": True}

    @durably.step(reconcile=lambda key: world.by_key.get(key, durably.NOT_DONE))
    def send(to: str) -> str:
        if crash["on"]:
            crash["on"] = False
            raise Crash("died after the intent, before the effect")
        world.sent.append(to)
        return "sent"

    engine = durably.Engine(db)

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> str:
        return ctx.step("send", send, "x")

    with pytest.raises(Crash):
        engine.run(w, run_id="r")
    assert [s.status for s in engine.history("r")] == ["intent"]
    assert engine.run(w, run_id="r") == "sent" and world.sent == ["x"]
    engine.close()


def test_keyed_effect_in_doubt_reruns_with_the_same_key(db: str) -> None:
    keys: list[str] = []
    engine = durably.Engine(db, fault_hook=crash_at("0", "effect"))

    @durably.step(effect=True)
    def charge(amount: int, *, idempotency_key: str) -> str:
        keys.append(idempotency_key)
        return "ch_1"

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> str:
        return ctx.step("charge", charge, 5)

    with pytest.raises(Crash):
        engine.run(w, run_id="order")
    assert engine.run(w, run_id="order") == "ch_1"
    assert keys == [engine.get_run("order").key("0")] * 2
    engine.close()


def test_cli_retry_and_skip(engine: durably.Engine, db: str) -> None:
    world = World()
    mail = build(engine, world)
    with pytest.raises(Crash):
        engine.run(mail, run_id="r")
    with pytest.raises(durably.RunInDoubt):
        engine.run(mail, run_id="r")
    runner = CliRunner()
    listed = runner.invoke(cli, ["runs", "list", "--status", "in_doubt", "--json", "--db", db])
    assert listed.exit_code == 0 and [r["run_id"] for r in json.loads(listed.output)] == ["r"]
    shown = runner.invoke(cli, ["runs", "show", "r", "--db", db])
    assert "intent" in shown.output and "durably retry r" in shown.output
    bad = runner.invoke(cli, ["skip", "r", "--output", "{not json", "--db", db])
    assert bad.exit_code != 0 and "not JSON" in bad.output
    assert engine.get_run("r").status == "in_doubt"  # nothing changed
    ok = runner.invoke(cli, ["skip", "r", "--output", '"msg-1"', "--json", "--db", db])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.output)["status"] == "queued"
    assert engine.run(mail, run_id="r") == "msg-1"
    again = runner.invoke(cli, ["retry", "r", "--db", db])
    assert again.exit_code != 0 and "completed" in again.output


def test_an_effect_in_doubt_past_the_dedupe_window_parks(tmp_path: Path) -> None:
    clock = durably.FakeClock()
    engine = durably.Engine(
        f"sqlite:///{tmp_path / 'j.db'}", clock=clock, fault_hook=crash_at("0", "effect")
    )
    keys: list[str] = []

    @durably.step(effect=True, dedupe_window_s=86_400)
    def charge(amount: int, *, idempotency_key: str) -> str:
        keys.append(idempotency_key)
        return "ch_1"

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> str:
        return ctx.step("charge", charge, 5)

    with pytest.raises(Crash):
        engine.run(w, run_id="late")
    clock.advance(3 * 86_400)  # the run was down for three days
    with pytest.raises(durably.RunInDoubt, match="dedupe_window_s=86400"):
        engine.run(w, run_id="late")
    assert keys == [engine.get_run("late").key("0")]  # not retried with a forgotten key
    engine.skip("late", "ch_1")
    assert engine.run(w, run_id="late") == "ch_1"
    engine.close()
