"""MCP tools under a real SIGKILL: an async agent's two ``add_note`` calls go to a real
MCP server over stdio, the agent is killed after the server did the second and before
durably recorded it; the resume sends that call again with the same idempotency key in
``_meta``, so the server, deduplicating on it, keeps one note per call."""

from __future__ import annotations

import json
import signal
import sqlite3
from pathlib import Path

from .scripts import run_script

AGENT = Path(__file__).with_name("mcp_agent.py")


def test_resume_resends_the_call_in_doubt_with_the_same_key(tmp_path: Path) -> None:
    killed = run_script(AGENT, tmp_path, "notes-1", "--kill")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    with sqlite3.connect(tmp_path / "world.db") as w:
        before = w.execute("SELECT key, pid FROM calls ORDER BY rowid").fetchall()
    assert len(before) == 2  # both notes reached the server; the second's record did not
    resumed = run_script(AGENT, tmp_path, "notes-1")
    assert resumed.returncode == 0, resumed.stderr
    [msg] = json.loads(resumed.stdout)
    assert [b["content"] for b in msg["content"]] == ["noted on A-1", "noted on A-2"]
    with sqlite3.connect(tmp_path / "world.db") as w:
        calls = w.execute("SELECT key, pid FROM calls ORDER BY rowid").fetchall()
        notes = w.execute("SELECT key FROM notes ORDER BY rowid").fetchall()
    # Only the call in doubt was sent again, with the key it had; the server kept one note.
    assert calls[:2] == before and len(calls) == 3
    second_key = next(k for k, _ in before if k.endswith(":1.1.0"))
    assert calls[2][0] == second_key and calls[2][1] != before[0][1]
    assert sorted(k for (k,) in notes) == sorted(k for k, _ in before)
