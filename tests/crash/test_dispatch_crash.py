"""``durably.tools.dispatch`` under a real SIGKILL: a model's three tool calls, one with
a bad argument (a tool-error message for the model, not a crash), the process killed
between the second call and the third (or inside the third, after its effect). The
resumed run executes the third only, with the key it had, and the messages are those of
a run that never crashed."""

from __future__ import annotations

import json
import signal
import sqlite3
from pathlib import Path

import pytest

from .scripts import run_script

AGENT = Path(__file__).with_name("dispatch_agent.py")


def attempts(tmp: Path) -> list[tuple[str, str, int]]:
    with sqlite3.connect(tmp / "world.db") as w:
        rows = w.execute("SELECT tool, key, pid FROM attempts ORDER BY rowid").fetchall()
    return [(str(t), str(k), int(p)) for t, k, p in rows]


def effects(tmp: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(tmp / "world.db") as w:
        rows = w.execute("SELECT tool, key FROM effects ORDER BY rowid").fetchall()
    return [(str(t), str(k)) for t, k in rows]


@pytest.fixture
def control(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[object], list[str]]:
    """A run that never crashed: its messages and the positions its keys end in."""
    tmp = tmp_path_factory.mktemp("control")
    done = run_script(AGENT, tmp, "control")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), [k.rsplit(":", 1)[1] for _, k, _ in attempts(tmp)]


@pytest.mark.parametrize("window", ["before", "effect"])
def test_resume_executes_only_the_third_call_with_its_key(
    tmp_path: Path, window: str, control: tuple[list[object], list[str]]
) -> None:
    killed = run_script(AGENT, tmp_path, "support-1", "--kill-at", window)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    first = attempts(tmp_path)
    assert [t for t, _, _ in first] == (["refund"] if window == "before" else ["refund", "notify"])
    resumed = run_script(AGENT, tmp_path, "support-1")
    assert resumed.returncode == 0, resumed.stderr
    after = attempts(tmp_path)
    # The resumed process ran the third call only; the first is never repeated.
    assert after[: len(first)] == first
    new = after[len(first) :]
    assert [t for t, _, _ in new] == ["notify"] and new[0][2] != first[0][2]
    refund_key = first[0][1]
    notify_keys = {k for t, k, _ in after if t == "notify"}
    assert len(notify_keys) == 1  # the same key before and after the kill
    # Keys as in a run that never crashed: the bad call took no position.
    assert [refund_key.rsplit(":", 1)[1], next(iter(notify_keys)).rsplit(":", 1)[1]] == control[1]
    assert effects(tmp_path) == [("refund", refund_key), ("notify", next(iter(notify_keys)))]
    messages, _ = control
    assert json.loads(resumed.stdout) == messages
    [ok1, bad, ok3] = messages
    assert ok1 == {"role": "tool", "tool_call_id": "call_1", "content": "refunded 500 cents on A-1"}
    assert bad["tool_call_id"] == "call_2"  # type: ignore[index]
    assert "cents" in bad["content"] and "integer" in bad["content"]  # type: ignore[index]
    assert "lots" not in bad["content"]  # type: ignore[index]
    assert ok3 == {"role": "tool", "tool_call_id": "call_3", "content": "sent to ana"}
