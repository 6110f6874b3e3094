"""A follower in another process that keeps disconnecting and reconnecting with its
cursor sees every committed event exactly once and in order, across a real SIGKILL of
the run's process and a takeover by another process (both stores)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import durably

HERE = Path(__file__).parent
WAIT_S_MAX = 120.0


class Follower(threading.Thread):
    """Runs follower processes one after another, each from the last cursor seen, until
    one reports the end; ``current`` is the running one (the test kills it once)."""

    def __init__(self, url: str, run_id: str) -> None:
        super().__init__(daemon=True)
        self.url, self.run_id = url, run_id
        self.seen: list[dict[str, Any]] = []
        self.current: subprocess.Popen[str] | None = None
        self.ended = False
        self.restarts = 0

    def run(self) -> None:
        deadline = time.monotonic() + WAIT_S_MAX
        while not self.ended and time.monotonic() < deadline:
            after = self.seen[-1]["cursor"] if self.seen else 0
            # Then disconnect after 6 events: still many reconnections over the run's
            # ~45 events, and half the process starts of 3 (each a second or more on a
            # loaded machine: the test outran its timeout).
            tail = [str(after), "6"]
            with subprocess.Popen(
                [sys.executable, str(HERE / "stream_follower.py"), self.url, self.run_id, *tail],
                stdout=subprocess.PIPE,
                text=True,
            ) as proc:
                self.current = proc
                assert proc.stdout is not None
                for line in proc.stdout:
                    event = json.loads(line)
                    if event.get("end"):
                        self.ended = True
                    else:
                        self.seen.append(event)
            self.restarts += 1


def agent(url: str, run_id: str, release: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(HERE / "stream_agent.py"), url, run_id, str(release)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(engine: durably.Engine, run_id: str, kind: str, position: str) -> None:
    deadline = time.monotonic() + WAIT_S_MAX
    while time.monotonic() < deadline:
        try:
            events = engine.events(run_id).events
        except durably.RunNotFound:
            events = []
        if any(e.kind == kind and e.position == position for e in events):
            return
        time.sleep(0.05)
    raise AssertionError(f"no {kind} at {position} within {WAIT_S_MAX} s")


# Three agent processes and a follower's dozen: on a loaded machine more than the suite's
# default timeout of process starts alone, none of which is what this test checks.
@pytest.mark.timeout(300)
def test_reconnecting_follower_sees_every_event_once_across_sigkill_and_takeover(
    journal_url: str, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    engine = durably.Engine(journal_url)
    first = agent(journal_url, "r", release)
    follower = Follower(journal_url, "r")
    try:
        wait_for(engine, "r", "step.started", "5")  # the intent of step 5 committed
        follower.start()
        first.kill()  # SIGKILL, inside step 5
        _, err = first.communicate(timeout=WAIT_S_MAX)
        assert first.returncode == -9, err
        while follower.current is None:
            time.sleep(0.01)
        follower.current.kill()  # and the follower too, wherever it is
        release.touch()
        second = agent(journal_url, "r", release)  # the takeover
        out, err = second.communicate(timeout=WAIT_S_MAX)
        assert second.returncode == 0, err
        assert out.strip() == str(sum(range(12)))
        follower.join(WAIT_S_MAX)
        assert follower.ended
        committed = engine.events("r").events
    finally:
        for proc in (first, follower.current):
            if proc is not None and proc.poll() is None:
                proc.kill()
        engine.close()
    assert [e["cursor"] for e in follower.seen] == [e.cursor for e in committed]
    assert [e["kind"] for e in follower.seen] == [e.kind for e in committed]
    assert [e.cursor for e in committed] == list(range(1, len(committed) + 1))
    assert follower.restarts > 3  # it really did disconnect and reconnect, many times
    kinds = [e.kind for e in committed]
    assert kinds.count("run.started") == 2 and kinds[-1] == "run.completed"
    takeover = kinds.index("run.started", kinds.index("run.started") + 1)
    assert kinds[takeover - 2] in ("lease.lost", "lease.expired")
    assert kinds[takeover - 1] == "lease.taken"
    # Every emit is there once, and every step completed once.
    ticks = [e.data["data"] for e in committed if e.kind == "user"]
    assert ticks == list(range(12))
    assert [e.position for e in committed if e.kind == "step.completed"] == [
        str(i) for i in range(12)
    ]
