"""Streamed model calls across real SIGKILLs, with the real ``openai`` and ``anthropic``
clients against a local SSE server that holds each stream open between chunks.

- A SIGKILL inside the tool after a streamed turn: the resumed process sends no second
  request for that turn, iterates the replayed stream and gets the same text and tool
  call, and the tool runs again under the same key.
- A follower in another process (``engine.follow``) reads ``model.delta`` events of a
  call before its step is recorded; a SIGKILL mid-stream gives it a ``model.restart``
  and a fresh series from the resumed process; the usage of the final stream event is
  in the spend exactly once.
"""

from __future__ import annotations

import json
import queue
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import durably

from ..integration.sse_servers import Hold, SSEServer, Turn

HERE = Path(__file__).parent
# Two or three such processes a test: more than the suite's default timeout when slow.
pytestmark = pytest.mark.timeout(360)
# Generous: an agent process imports a model client and opens the journal, which took
# over a minute on a loaded machine (the time is not what these tests check).
WAIT_S = 120.0


def _turn(path: str, body: dict[str, Any]) -> Turn:
    """Turn 1 asks for the refund tool; once the tool's result is in, turn 2 answers."""
    answered = any(
        m.get("role") == "tool"
        or (
            isinstance(m.get("content"), list)
            and any(b.get("type") == "tool_result" for b in m["content"])
        )
        for m in body.get("messages", [])
    )
    if answered:
        return Turn("Refunded order A-1.", None, input_tokens=20, output_tokens=5)
    return Turn("Checking order A-1 now.", ("refund", {"order": "A-1"}), 11, 7)


def _agent(
    url: str, server: SSEServer, world: Path, provider: str, run_id: str, *extra: str
) -> subprocess.Popen[str]:
    base = f"{server.url}/v1" if provider == "openai" else server.url
    args = [url, base, str(world), provider, run_id, *extra]
    return subprocess.Popen(
        [sys.executable, str(HERE / "stream_model_agent.py"), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _turn_requests(server: SSEServer) -> tuple[int, int]:
    first = sum(1 for _, body in server.seen if _turn("", body).tool is not None)
    return first, len(server.seen) - first


@pytest.mark.parametrize(
    ("provider", "journal_url"),
    [("openai", "sqlite"), ("anthropic", "postgres")],
    indirect=["journal_url"],
)
def test_sigkill_in_the_tool_after_a_streamed_turn(
    provider: str, journal_url: str, tmp_path: Path
) -> None:
    server = SSEServer(_turn, delay_s=0.001)
    world = tmp_path / "world.db"
    try:
        killed = _agent(journal_url, server, world, provider, "k1", "--kill-in-tool")
        killed.communicate(timeout=WAIT_S)
        assert killed.returncode == -signal.SIGKILL
        assert _turn_requests(server) == (1, 0)
        resumed = _agent(journal_url, server, world, provider, "k1")
        out, err = resumed.communicate(timeout=WAIT_S)
        assert resumed.returncode == 0, err
        assert json.loads(out) == {"answer": "Refunded order A-1."}
        # No second request for the streamed turn the journal holds; turn 2 once.
        assert _turn_requests(server) == (1, 1)
    finally:
        server.close()
    db = sqlite3.connect(world)
    turns = db.execute("SELECT pid, text, tool FROM turns ORDER BY rowid").fetchall()
    keys = [k for (k,) in db.execute("SELECT key FROM refunds ORDER BY rowid")]
    db.close()
    # The killed process iterated the live stream, the resumed one the replayed stream:
    # the same text and the same tool call.
    assert len(turns) == 2 and turns[0][0] != turns[1][0]
    assert (
        turns[0][1:] == turns[1][1:] == ("Checking order A-1 now.", '["refund", {"order": "A-1"}]')
    )
    assert len(keys) == 2 and keys[0] == keys[1]  # the tool's key unchanged
    engine = durably.Engine(journal_url)
    try:
        spend = engine.spend("k1")
        assert (spend.entries, spend.input_tokens, spend.output_tokens) == (2, 31, 12)
    finally:
        engine.close()


class _Lines(threading.Thread):
    """A process's stdout, one JSON object per line, into a queue."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        super().__init__(daemon=True)
        self.proc = proc
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()
        self.start()

    def run(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(json.loads(line))

    def until(self, test: Any) -> list[dict[str, Any]]:
        """Lines read until one passes ``test`` (that one included)."""
        got: list[dict[str, Any]] = []
        while True:
            line = self.lines.get(timeout=WAIT_S)
            got.append(line)
            if test(line):
                return got


def test_a_follower_reads_deltas_before_the_record_and_a_restart_after_a_crash(
    journal_url: str, tmp_path: Path
) -> None:
    hold = Hold(after=4)
    server = SSEServer(_turn, delay_s=0.001, hold=hold)
    world = tmp_path / "world.db"
    poll_s = 0.05
    follower = subprocess.Popen(
        [sys.executable, str(HERE / "model_follower.py"), journal_url, "f1", str(poll_s)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        first = _agent(journal_url, server, world, "openai", "f1")
        lines = _Lines(follower)
        assert hold.reached.wait(WAIT_S)
        before = lines.until(lambda e: e.get("kind") == "model.delta")
        # The follower has a delta of turn 1 while its step is not recorded.
        engine = durably.Engine(journal_url)
        try:
            assert engine.history("f1") == []
        finally:
            engine.close()
        assert not any(e.get("kind") == "step.completed" for e in before)
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=WAIT_S)
        hold.go.set()
        resumed = _agent(journal_url, server, world, "openai", "f1")
        out, err = resumed.communicate(timeout=WAIT_S)
        assert resumed.returncode == 0, err
        assert json.loads(out) == {"answer": "Refunded order A-1."}
        rest = lines.until(lambda e: e.get("end"))
        follower.wait(WAIT_S)
        lines.join(WAIT_S)
    finally:
        server.close()
        if follower.stdout is not None:
            follower.stdout.close()
    events = [e for e in before + rest if "kind" in e]
    cursors = [e["cursor"] for e in events]
    assert cursors == sorted(set(cursors))  # no repeat, in order
    turn1 = [e for e in events if e["kind"].startswith("model.") and e["position"] == "0"]
    restarts = [e for e in turn1 if e["kind"] == "model.restart"]
    assert [r["data"]["token"] for r in restarts] == [1, 2]  # the killed series, the new one
    # The new series starts at index 0 after its restart and carries the whole text.
    at = turn1.index(restarts[1])
    fresh = [e["data"] for e in turn1[at + 1 :]]
    assert [d["index"] for d in fresh] == list(range(len(fresh)))
    assert {d["token"] for d in fresh} == {2}
    assert "".join(d.get("text", "") for d in fresh) == "Checking order A-1 now."
    completed = [i for i, e in enumerate(events) if e["kind"] == "step.completed"]
    assert events.index(restarts[1]) < completed[0]
    engine = durably.Engine(journal_url)
    try:
        spend = engine.spend("f1")
        # The killed attempt never reached its final event: the usage is counted once.
        assert (spend.entries, spend.input_tokens, spend.output_tokens) == (2, 31, 12)
    finally:
        engine.close()
    assert _turn_requests(server) == (2, 1)  # turn 1 ran again: it was never recorded
