"""``durably.integrations.openai_agents.DurableRunner`` under a real SIGKILL: the real
Agents SDK and ``openai`` client against a scripted model server on 127.0.0.1 that
counts its requests, tools writing to a separate SQLite world with the key they read
from ``durably.current_step()``.

Each scenario runs the agent in a subprocess killed at a chosen point, then resumes it
in this process (the killed owner's pid is gone, so the claim is immediate) and
compares with an uncrashed run of the same agent: no recorded model turn is asked
again, each write is in the world once under an unchanged key, the final answer is the
uncrashed run's.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents", reason="the OpenAI Agents SDK: pip install 'durably[openai-agents]'")

from agents import set_tracing_disabled

import durably
from tests.integration.agents_server import AgentsModelServer

from .agents_agent import QUESTION, Options, build

AGENT = Path(__file__).with_name("agents_agent.py")
ROOT = Path(__file__).parents[2]
# No trace export, here or in the agent's process: the tests make no request off 127.0.0.1.
ENV = {**os.environ, "OPENAI_AGENTS_DISABLE_TRACING": "1"}
set_tracing_disabled(True)


@pytest.fixture(scope="module")
def server() -> Iterator[AgentsModelServer]:
    srv = AgentsModelServer()
    yield srv
    srv.close()


# The suite runs each kill point once (its time is scarce): the kill after a model turn
# on Chat Completions, the kill inside a tool on the Responses API's streamed run through
# a handoff (test_streamed_..., which checks everything the plain kill inside a tool
# does). The other pairings are the same code paths; DURABLY_TORTURE_AGENTS=1 runs them.
OTHER_API = pytest.mark.skipif(
    os.environ.get("DURABLY_TORTURE_AGENTS") != "1",
    reason="the other API for this kill point: set DURABLY_TORTURE_AGENTS=1 to run it",
)


def opts(tmp: Path, server: AgentsModelServer, script: str, **kw: Any) -> Options:
    return Options(
        f"sqlite:///{tmp / 'journal.db'}", str(tmp / "world.db"), server.url, script, **kw
    )


def command(o: Options, run_id: str) -> list[str]:
    cmd = [sys.executable, str(AGENT), o.journal, o.world, run_id, "--base-url", o.base_url]
    cmd += ["--script", o.script, "--api", o.api]
    if o.stream:
        cmd.append("--stream")
    if o.kill_at:
        cmd += ["--kill-at", o.kill_at]
    return cmd


def killed(o: Options, run_id: str) -> None:
    done = subprocess.run(
        command(o, run_id), env=ENV, cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == -signal.SIGKILL, done.stderr


def run_here(o: Options, run_id: str) -> dict[str, Any]:
    """Run (or resume) the agent in this process, with no kill hook."""
    engine, support, world = build(
        Options(o.journal, o.world, o.base_url, o.script, o.api, o.stream)
    )
    try:
        result: dict[str, Any] = engine.run(support, QUESTION, run_id=run_id)
        return result
    finally:
        engine.close()
        world.close()


def attempts(o: Options) -> list[tuple[str, str, int]]:
    with sqlite3.connect(o.world) as w:
        rows = w.execute("SELECT tool, key, pid FROM attempts ORDER BY rowid").fetchall()
    return [(str(t), str(k), int(p)) for t, k, p in rows]


def effects(o: Options) -> list[tuple[str, str]]:
    with sqlite3.connect(o.world) as w:
        rows = w.execute("SELECT tool, key FROM effects ORDER BY rowid").fetchall()
    return [(str(t), str(k)) for t, k in rows]


def position(key: str) -> str:
    return key.rsplit(":", 1)[1]


def control(tmp: Path, server: AgentsModelServer, script: str, **kw: Any) -> dict[str, Any]:
    """An uncrashed run: its result, the requests it made, its keys' positions."""
    tmp.mkdir()
    o = opts(tmp, server, script, **kw)
    before = server.requests
    result = run_here(o, "control")
    return {
        "result": result,
        "requests": server.requests - before,
        "positions": sorted((t, position(k)) for t, k in effects(o)),
    }


@pytest.mark.parametrize(
    "api",
    ["chat", pytest.param("responses", marks=[pytest.mark.torture, OTHER_API])],
)
def test_killed_after_the_first_model_turn_is_recorded(
    tmp_path: Path, server: AgentsModelServer, api: str
) -> None:
    base = control(tmp_path / "control", server, "refund", api=api)
    o = opts(tmp_path, server, "refund", api=api, kill_at="model")
    start = server.requests
    killed(o, "support-1")
    assert server.requests - start == 1  # the first turn, recorded, then the kill
    assert attempts(o) == []
    result = run_here(o, "support-1")
    # The resumed run asked the model for the second turn only.
    assert server.requests - start == base["requests"] == 2
    assert result == base["result"]
    assert result["final"] == "done: refunded 500 cents on A-1"
    assert [(t, position(k)) for t, k in effects(o)] == base["positions"]
    assert len(attempts(o)) == 1


@pytest.mark.parametrize(
    "api",
    [
        pytest.param("responses", marks=[pytest.mark.torture, OTHER_API]),
        pytest.param("chat", marks=[pytest.mark.torture, OTHER_API]),
    ],
)
def test_killed_inside_the_tool_after_its_write(
    tmp_path: Path, server: AgentsModelServer, api: str
) -> None:
    base = control(tmp_path / "control", server, "refund", api=api)
    o = opts(tmp_path, server, "refund", api=api, kill_at="tool")
    start = server.requests
    killed(o, "support-1")
    [(tool, key, pid)] = attempts(o)
    assert tool == "refund"
    result = run_here(o, "support-1")
    # The tool ran again (at least once: a plain SDK tool is an ordinary step) under
    # the same key, so the world holds the write once; no model turn was asked twice.
    again = attempts(o)
    assert [(t, k) for t, k, _ in again] == [("refund", key), ("refund", key)]
    assert again[1][2] != pid
    assert effects(o) == [("refund", key)]
    assert server.requests - start == base["requests"] == 2
    assert result == base["result"]
    assert [(t, position(k)) for t, k in effects(o)] == base["positions"]


def test_parallel_tool_calls_killed_between_them(tmp_path: Path, server: AgentsModelServer) -> None:
    """The SDK runs the turn's two calls concurrently; killed when the first is
    recorded (the second waits before its write), the resumed run executes the second
    only, and both keys end in the positions of an uncrashed run (the order the model
    listed the calls, never the order they finished in)."""
    base = control(tmp_path / "control", server, "parallel")
    assert base["positions"] == [("notify", "1.1.0"), ("refund", "1.0.0")]
    o = opts(tmp_path, server, "parallel", kill_at="between")
    start = server.requests
    killed(o, "support-1")
    assert [t for t, _, _ in attempts(o)] == ["refund"]
    result = run_here(o, "support-1")
    done = attempts(o)
    assert sorted(t for t, _, _ in done) == ["notify", "refund"]  # each ran once
    assert sorted((t, position(k)) for t, k in effects(o)) == base["positions"]
    assert server.requests - start == base["requests"] == 2
    assert result == base["result"]


def test_needs_approval_parks_and_runs_once_after_approve(
    tmp_path: Path, server: AgentsModelServer
) -> None:
    """A needs_approval tool parks the run as a durably approval; the waiting process
    is SIGKILLed; engine.approve decides it and the resumed run executes the tool once
    (no SDK RunState involved)."""
    o = opts(tmp_path, server, "approve")
    proc = subprocess.Popen(
        command(o, "support-1"), env=ENV, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    engine: durably.Engine | None = None
    try:
        pending: list[durably.PendingApproval] = []
        # Generous: the child imports the SDK and asks the model first (30 s ran out
        # under a load average of 19); the loop ends as soon as the request shows.
        deadline = time.monotonic() + 120
        while not pending and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
            if engine is None and (tmp_path / "journal.db").exists():
                engine = durably.Engine(o.journal)
            if engine is not None:
                try:
                    pending = engine.pending_approvals()
                except durably.StoreError:
                    pending = []
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        [request] = pending
        assert (request.action, request.args) == ("close_account", {"user": "bob"})
        assert attempts(o) == []  # parked before the tool ran
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        assert engine is not None
        engine.approve("support-1", request.request_id, digest=request.digest, by="ana")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
        if engine is not None:
            engine.close()
    result = run_here(o, "support-1")
    assert result["final"] == "done: closed bob"
    [(tool, key, _)] = attempts(o)
    assert tool == "close_account" and position(key) == "1.0.1"


def test_streamed_handoff_run_killed_inside_the_tool_delivers_deltas_to_a_follower(
    tmp_path: Path, server: AgentsModelServer
) -> None:
    """run_streamed through a handoff, killed inside the billing agent's tool after its
    write: the resumed run replays the two recorded streamed turns (no second request),
    the tool runs again under the same key (the world holds its write once), the caller
    iterates the replayed streams and gets the final text's deltas, and a follower of
    the run reads the model.delta events: the crashed attempt's tool-call fragments and
    the resumed attempt's text."""
    base = control(tmp_path / "control", server, "triage", stream=True)
    o = opts(tmp_path, server, "triage", stream=True, kill_at="tool")
    start = server.requests
    killed(o, "support-1")
    assert server.requests - start == 2  # triage's turn and billing's, both recorded
    [(_, key_before, pid)] = attempts(o)
    result = run_here(o, "support-1")
    again = attempts(o)
    assert [(t, k) for t, k, _ in again] == [("refund", key_before)] * 2
    assert again[1][2] != pid
    assert result == base["result"]
    assert "".join(result["deltas"]) == result["final"] == "done: refunded 500 cents on A-1"
    assert server.requests - start == base["requests"] == 3
    [(tool, key)] = effects(o)
    assert (tool, position(key)) == ("refund", "2.0.0")  # the turns at 0 and 1
    engine = durably.Engine(o.journal)
    try:
        stream = list(engine.follow("support-1", poll_s=0.02))
    finally:
        engine.close()
    events = [e for e in stream if e.kind.startswith("model.")]
    # Written before their turn's record: a follower has them before step.completed.
    completed = {e.position: e.cursor for e in stream if e.kind == "step.completed"}
    assert all(e.cursor < completed[e.position] for e in events)
    # One series per live attempt of a turn, each after its model.restart: the crashed
    # process streamed the turns at 0 and 1 (token 1), the resumed one the turn at 3
    # (token 2); the replayed turns made none.
    restarts = [(e.position, e.data["token"]) for e in events if e.kind == "model.restart"]
    assert restarts == [("0", 1), ("1", 1), ("3", 2)]
    deltas = [e for e in events if e.kind == "model.delta"]
    calls = [(e.position, e.data.get("name")) for e in deltas if e.data.get("name")]
    assert calls == [("0", "transfer_to_billing"), ("1", "refund")]
    arguments = {
        p: "".join(e.data.get("arguments", "") for e in deltas if e.position == p) for p in "01"
    }
    assert arguments == {"0": "{}", "1": json.dumps({"order_id": "A-1", "cents": 500})}
    text = [e for e in deltas if "text" in e.data]
    assert "".join(e.data["text"] for e in text) == result["final"]
    assert {(e.position, e.data["token"]) for e in text} == {("3", 2)}
    for p in ("0", "1", "3"):
        assert [e.data["index"] for e in deltas if e.position == p] == list(
            range(len([e for e in deltas if e.position == p]))
        )
