"""Keys that cannot collide: ``{run_id}:{incarnation}:{position}``, at most 255 characters.

A human-chosen run id (``alert-42``) reused in another journal, or after a wiped dev
database, must not hit the receiver's stored response for the old run (no email sent, no
error); the same run keeps its keys across crashes, retries and takeovers.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

import durably
from durably.history import (
    GATHER_DEPTH_MAX,
    INCARNATION_CHARS,
    KEY_CHARS_MAX,
    RUN_ID_CHARS_MAX,
    SCOPE_POSITIONS_MAX,
    idempotency_key,
)
from durably.idempotency import IdempotencyStore, migrate


class Crash(BaseException):
    """Stands in for a process death inside one process (real deaths: tests/crash)."""


def migrated(url: str) -> str:
    """``url`` with the receiving side's tables created (as `durably migrate` does)."""
    migrate(url)
    return url


def alert_workflow(engine: durably.Engine, mailbox: IdempotencyStore, sent: list[str]) -> Any:
    @mailbox.idempotent
    def send_email(to: str, body: str) -> str:
        sent.append(body)
        return f"msg-{len(sent)}"

    @durably.step(effect=True)
    def email(to: str, body: str, *, idempotency_key: str) -> str:
        result: str = send_email(to, body, idempotency_key=idempotency_key)
        return result

    @engine.workflow(name="alert")
    def alert(ctx: durably.Context, n: int) -> str:
        ctx.step("plan", lambda: "page on-call")
        return ctx.step("email", email, "oncall@example.com", f"alert {n} fired")

    return alert


def test_the_same_run_id_in_two_journals_sends_two_emails(tmp_path: Path) -> None:
    """The receiver of both journals must see two requests, not one stored response."""
    mailbox = IdempotencyStore(migrated(f"sqlite:///{tmp_path / 'mailbox.db'}"))
    sent: list[str] = []
    staging = durably.Engine(f"sqlite:///{tmp_path / 'staging.db'}")
    prod = durably.Engine(f"sqlite:///{tmp_path / 'prod.db'}")
    try:
        first = staging.run(alert_workflow(staging, mailbox, sent), 42, run_id="alert-42")
        second = prod.run(alert_workflow(prod, mailbox, sent), 42, run_id="alert-42")
    finally:
        staging.close()
        prod.close()
        mailbox.close()
    assert sent == ["alert 42 fired", "alert 42 fired"]  # two runs, two emails
    assert (first, second) == ("msg-1", "msg-2")


def test_a_wiped_journal_re_creates_a_run_id_with_new_keys(tmp_path: Path) -> None:
    mailbox = IdempotencyStore(migrated(f"sqlite:///{tmp_path / 'mailbox.db'}"))
    sent: list[str] = []
    journal = tmp_path / "dev.db"
    keys = []
    for _ in range(2):
        engine = durably.Engine(f"sqlite:///{journal}")
        try:
            engine.run(alert_workflow(engine, mailbox, sent), 42, run_id="alert-42")
            keys.append(engine.get_run("alert-42").key("1"))
        finally:
            engine.close()
        for f in tmp_path.glob("dev.db*"):  # rm dev.db: a fresh start of a dev database
            f.unlink()
    mailbox.close()
    assert sent == ["alert 42 fired"] * 2 and keys[0] != keys[1]


def test_keys_are_stable_across_crashes_retries_and_takeovers(tmp_path: Path) -> None:
    """One incarnation for the life of the run: every attempt of a step gets one key."""
    url = f"sqlite:///{tmp_path / 'j.db'}"
    armed = {"crash": True, "fail": True}

    def hook(run_id: str, pos: str, name: str, window: str) -> None:
        if pos == "1" and window == "effect" and armed["crash"]:
            armed["crash"] = False
            raise Crash("after the effect, before its record")

    engine = durably.Engine(url, fault_hook=hook)
    keys: list[str] = []

    @durably.step(effect=True)
    def charge(amount: int, *, idempotency_key: str) -> str:
        keys.append(idempotency_key)
        if armed["fail"] and not armed["crash"] and len(keys) == 2:
            raise ValueError("card network down")
        return "ch_1"

    @engine.workflow(name="pay")
    def pay(ctx: durably.Context) -> str:
        ctx.step("plan", lambda: "p")
        return ctx.step("charge", charge, 80)

    with pytest.raises(Crash):
        engine.run(pay, run_id="order-7")  # a crash after the charge: an intent stays
    with pytest.raises(durably.WorkflowFailed):
        engine.run(pay, run_id="order-7")  # the retry of the charge fails for good
    armed["fail"] = False
    engine.retry("order-7")
    other = durably.Engine(url)  # another process takes the run over
    other.workflow(name="pay")(pay.fn)
    assert other.resume("order-7") == "ch_1"
    run = other.get_run("order-7")
    assert run.incarnation is not None and re.fullmatch(r"[0-9a-f]{12}", run.incarnation)
    assert keys == [f"order-7:{run.incarnation}:1"] * 3
    engine.close()
    other.close()


def test_the_longest_run_id_and_the_deepest_gather_fit_in_a_key(tmp_path: Path) -> None:
    engine = durably.Engine(f"sqlite:///{tmp_path / 'j.db'}")
    keys: list[str] = []

    def tool(*, idempotency_key: str) -> str:
        keys.append(idempotency_key)
        return idempotency_key

    async def nest(ctx: durably.AsyncContext, depth: int) -> Any:
        if depth == 0:
            return await ctx.step("leaf", tool)
        await ctx.step("pad", tool)  # a non-zero index at every level
        return await ctx.gather(nest(ctx, depth - 1), nest(ctx, depth - 1))

    @engine.workflow(name="deep")
    async def deep(ctx: durably.AsyncContext, depth: int) -> Any:
        await ctx.step("first", tool)
        return await nest(ctx, depth)

    longest = "r" * RUN_ID_CHARS_MAX
    engine.run(deep, GATHER_DEPTH_MAX, run_id=longest)
    incarnation = engine.get_run(longest).incarnation
    deepest = max(keys, key=len)
    assert deepest.count(".") == 2 * GATHER_DEPTH_MAX and deepest.startswith(
        f"{longest}:{incarnation}:2."
    )
    assert all(len(k) <= KEY_CHARS_MAX for k in keys)
    # The bound holds for the largest numbers a position may hold, too.
    widest = ".".join([str(SCOPE_POSITIONS_MAX - 1)] * (1 + 2 * GATHER_DEPTH_MAX))
    assert len(idempotency_key(longest, "f" * INCARNATION_CHARS, widest)) <= KEY_CHARS_MAX

    # One level deeper is refused with a clear error, and the run is blocked (not failed).
    with pytest.raises(durably.ConfigError, match=f"at most {GATHER_DEPTH_MAX} levels"):
        engine.run(deep, GATHER_DEPTH_MAX + 1, run_id="too-deep")
    assert engine.get_run("too-deep").status == "blocked"
    engine.close()


def test_a_run_id_too_long_for_its_keys_is_refused(tmp_path: Path) -> None:
    engine = durably.Engine(f"sqlite:///{tmp_path / 'j.db'}")

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> str:
        return "ok"

    with pytest.raises(durably.ConfigError, match=f"at most {RUN_ID_CHARS_MAX} characters"):
        engine.run(w, run_id="r" * (RUN_ID_CHARS_MAX + 1))
    with pytest.raises(durably.ConfigError, match="receiving side's 255"):
        engine.start(w, run_id="r" * (RUN_ID_CHARS_MAX + 1))
    assert engine.store.list_runs() == []
    engine.close()


def test_too_many_positions_in_one_scope_are_refused() -> None:
    from durably.clock import FakeClock
    from durably.core import RunCore, Scope
    from durably.replay.setup import RunSetup

    core = RunCore(RunSetup("r", [], FakeClock()))
    with pytest.raises(durably.ConfigError, match="recording calls"):
        Scope(core, f"3.{SCOPE_POSITIONS_MAX}.")
    scope = Scope(core, "3.0.")
    scope.next = SCOPE_POSITIONS_MAX - 1
    assert scope.take() == f"3.0.{SCOPE_POSITIONS_MAX - 1}"
    with pytest.raises(durably.ConfigError, match="recording calls"):
        scope.take()
    assert isinstance(core.poisoned, durably.ConfigError)  # the run blocks


def test_step_info_tells_a_fault_hook_the_real_key(tmp_path: Path) -> None:
    from durably.core import fault_step

    seen: list[str] = []

    def hook(run_id: str, pos: str, name: str, window: str) -> None:
        info = fault_step()
        assert info is not None
        seen.append(info.key)

    engine = durably.Engine(f"sqlite:///{tmp_path / 'j.db'}", fault_hook=hook)
    got: list[str] = []

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> None:
        ctx.step("a", lambda *, idempotency_key: got.append(idempotency_key))

    engine.run(w, run_id="r")
    assert set(seen) == set(got) == {engine.get_run("r").key("0")}
    engine.close()


def test_runs_show_prints_the_keys_the_steps_received(tmp_path: Path) -> None:
    import json

    from click.testing import CliRunner

    from durably.cli import main as cli

    db = f"sqlite:///{tmp_path / 'j.db'}"
    engine = durably.Engine(db)
    got: list[str] = []

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> None:
        ctx.random()
        ctx.step("a", lambda *, idempotency_key: got.append(idempotency_key))

    engine.run(w, run_id="r")
    incarnation = engine.get_run("r").incarnation
    engine.close()
    runner = CliRunner()
    shown = json.loads(runner.invoke(cli, ["runs", "show", "r", "--json", "--db", db]).output)
    assert shown["run"]["incarnation"] == incarnation
    assert [s["key"] for s in shown["steps"]] == [f"r:{incarnation}:0", got[0]]
    text = runner.invoke(cli, ["runs", "show", "r", "--db", db], env={"COLUMNS": "250"}).output
    assert got[0] in text and f"incarnation={incarnation}" in text
