"""MCP tools under a real SIGKILL: an async agent's two ``add_note`` calls go to a real
MCP server over stdio, the agent is killed after the server did the second and before
durably recorded it; the resume sends that call again with the same idempotency key in
``_meta``, so the server, deduplicating on it, keeps one note per call."""

from __future__ import annotations

import json
import signal
import sqlite3
from pathlib import Path

import durably

from .scripts import run_script

AGENT = Path(__file__).with_name("mcp_agent.py")


def test_resume_resends_the_call_in_doubt_with_the_same_key(tmp_path: Path) -> None:
    killed = run_script(AGENT, tmp_path, "notes-1", "--kill")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    with sqlite3.connect(tmp_path / "world.db") as w:
        before = w.execute("SELECT key, pid FROM calls ORDER BY rowid").fetchall()
    assert len(before) == 2  # both notes reached the server; the second's record did not
    with durably.Engine(f"sqlite:///{tmp_path / 'journal.db'}") as engine:
        run = engine.get_run("notes-1")
        recorded = {run.key(s.position) for s in engine.history("notes-1") if s.status == "ok"}
    assert second_key_of(before) not in recorded
    resumed = run_script(AGENT, tmp_path, "notes-1")
    assert resumed.returncode == 0, resumed.stderr
    [msg] = json.loads(resumed.stdout)
    assert [b["content"] for b in msg["content"]] == ["noted on A-1", "noted on A-2"]
    with sqlite3.connect(tmp_path / "world.db") as w:
        calls = w.execute("SELECT key, pid FROM calls ORDER BY rowid").fetchall()
        notes = w.execute("SELECT key FROM notes ORDER BY rowid").fetchall()
    # Only the calls the journal had not recorded at the kill were sent again, each with the
    # key it had: the killed call (1.1.0) always, and its concurrent sibling (1.0.0) only
    # when the kill came before its result was recorded (a loaded machine may do that).
    assert calls[:2] == before
    second_key = next(k for k, _ in before if k.endswith(":1.1.0"))
    resent = [k for k, _ in calls[2:]]
    assert second_key in resent and len(resent) == len(set(resent))
    assert set(resent) == {k for k, _ in before} - recorded
    assert all(pid != before[0][1] for _, pid in calls[2:])
    assert sorted(k for (k,) in notes) == sorted(k for k, _ in before)


def second_key_of(calls: list[tuple[str, int]]) -> str:
    """The key of the killed call (position 1.1.0) among the server's calls."""
    return next(k for k, _ in calls if k.endswith(":1.1.0"))
