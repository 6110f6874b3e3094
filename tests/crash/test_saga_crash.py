"""A saga SIGKILLed during compensation resumes it: each compensation ran exactly once.

A real subprocess (tests/crash/saga_agent.py) books a flight, a hotel and a car, fails
for good at the tour, and is SIGKILLed at a chosen point of its compensation (the
fault hook sends a real SIGKILL). Started again, it replays the bookings and the failure,
replays the compensations that finished, runs the rest, and ends ``failed`` with the
tour's error. Effects and executions are counted in a separate SQLite database: every
booking and cancellation happened once; a cancellation killed after its effect ran again
with the same key (the world deduplicates it); no other step function ran twice.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import durably
from durably.history import COMPENSATE, FAILED, HALT, OK, STEP

AGENT = Path(__file__).with_name("saga_agent.py")
RUN_ID = "trip-9"
# position:window -> the cancellation run twice (killed after its effect, before its record)
KILLS = {
    "3:recorded": None,  # the tour's failure is recorded; compensation has not begun
    "5:before": None,  # the marker is not written yet; nothing undone
    "5:effect": "cancel:car",
    "6:recorded": None,  # between two compensations
    "7:effect": "cancel:flight",
}


def agent(journal_url: str, tmp: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(AGENT), journal_url, str(tmp / "world.db"), RUN_ID, *extra],
        capture_output=True,
        text=True,
        timeout=60,
    )


def world(tmp: Path) -> tuple[list[str], dict[str, int]]:
    """Step function executions in order, and requests per effect."""
    with sqlite3.connect(tmp / "world.db") as w:
        execs = [r[0] for r in w.execute("SELECT fn FROM executions ORDER BY rowid")]
        effects = dict(w.execute("SELECT what, requests FROM effects").fetchall())
    return execs, effects


def _pairs() -> list[Any]:
    """Every kill point on both stores and in both modes, paired (10 cases, not the 20 of
    the full product): kill point i runs sync on one store and async on the other, the
    choice alternating, so each store sees both modes, and each (store, kill point) and
    (kill point, mode) pair is covered. The sync and async drivers share one saga core,
    and both stores one semantics, so the cases the product adds (postgres + async at
    kill point 3, ...) exercised no code these do not."""
    out = []
    for i, kill in enumerate(KILLS):
        for store in ("sqlite", "postgres"):
            mode = ("sync", "async")[(i + (store == "postgres")) % 2]
            marks = [pytest.mark.postgres] if store == "postgres" else []
            out.append(pytest.param(store, kill, mode, marks=marks, id=f"{store}-{kill}-{mode}"))
    return out


@pytest.mark.parametrize(("journal_url", "kill", "mode"), _pairs(), indirect=["journal_url"])
def test_sigkill_during_compensation_resumes_it_and_each_runs_once(
    journal_url: str, tmp_path: Path, kill: str, mode: str
) -> None:
    extra = ("--async",) if mode == "async" else ()
    killed = agent(journal_url, tmp_path, "--kill", kill, *extra)
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    resumed = agent(journal_url, tmp_path, *extra)
    assert resumed.returncode == 3, resumed.stdout + resumed.stderr
    assert json.loads(resumed.stdout) == {
        "failed": "ValueError",
        "message": "no seats left on the tour",
    }
    execs, effects = world(tmp_path)
    twice = KILLS[kill]
    bookings = ["book:flight", "book:hotel", "book:car", "book:tour"]
    expected = Counter([*bookings, "cancel:car", "cancel:hotel", "cancel:flight"])
    if twice is not None:
        expected[twice] += 1  # the same key again: the world did it once
    assert Counter(execs) == expected
    cancels = [e for e in execs if e.startswith("cancel:")]
    assert list(dict.fromkeys(cancels)) == ["cancel:car", "cancel:hotel", "cancel:flight"]
    booked = {what.split("@")[0] for what in effects if what.startswith("cancelled ")}
    assert booked == {"cancelled booked flight", "cancelled booked hotel", "cancelled booked car"}
    assert len(effects) == 6  # three bookings, three cancellations: each happened once
    assert sum(effects.values()) == 6 + (twice is not None)
    with durably.Engine(journal_url) as e:
        shape = [(r.position, r.kind, r.name, r.status) for r in e.history(RUN_ID)]
        assert e.get_run(RUN_ID).status == "failed"
    assert shape == [
        ("0", STEP, "flight", OK),
        ("1", STEP, "hotel", OK),
        ("2", STEP, "car", OK),
        ("3", STEP, "tour", FAILED),
        ("4", COMPENSATE, "durably.compensate", OK),
        ("5", STEP, "undo:car", OK),
        ("6", STEP, "undo:hotel", OK),
        ("7", STEP, "undo:flight", OK),
    ]
    # Finished: a further start returns the recorded failure and runs nothing.
    again = agent(journal_url, tmp_path, *extra)
    assert again.returncode == 3
    assert world(tmp_path)[0] == execs


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}


@pytest.mark.parametrize("kill", [None, "4:recorded", "5:effect"])
def test_a_cancel_from_another_process_mid_saga_compensates_and_ends_cancelled(
    journal_url: str, tmp_path: Path, kill: str | None
) -> None:
    """The real ``durably cancel`` command cancels the run while it books the hotel: the
    booking completes under its key, the car is never booked, the hotel and the flight
    are cancelled (through the cancel latch), and the run ends ``cancelled``; a SIGKILL
    during that compensation resumes it without repeating a cancellation."""
    extra = ("--kill", kill) if kill else ()
    world_db = str(tmp_path / "world.db")
    proc = subprocess.Popen(
        [sys.executable, str(AGENT), journal_url, world_db, RUN_ID, "--hold", "hotel", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "inside").exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the agent never booked the hotel"
            time.sleep(0.02)
        why = ("--reason", "the customer called it off")
        cancel = subprocess.run(
            [sys.executable, "-m", "durably.cli", "cancel", RUN_ID, "--db", journal_url, *why],
            capture_output=True,
            text=True,
            timeout=120,
            env=_env(),
        )
        assert cancel.returncode == 0, cancel.stderr
        (tmp_path / "release").write_text("1")
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    if kill:
        assert proc.returncode == -signal.SIGKILL, out + err
        resumed = agent(journal_url, tmp_path)
        out, err, code = resumed.stdout, resumed.stderr, resumed.returncode
    else:
        code = proc.returncode
    assert code == 5, out + err
    assert json.loads(out) == {"cancelled": "the customer called it off"}
    execs, effects = world(tmp_path)
    twice = {"5:effect": "cancel:flight"}.get(kill or "")
    expected = Counter(["book:flight", "book:hotel", "cancel:hotel", "cancel:flight"])
    if twice is not None:
        expected[twice] += 1  # killed after its effect: the same key again, done once
    assert Counter(execs) == expected  # the car was never booked
    assert len(effects) == 4 and sum(effects.values()) == 4 + (twice is not None)
    with durably.Engine(journal_url) as e:
        shape = [(r.position, r.kind, r.name) for r in e.history(RUN_ID)]
        assert e.get_run(RUN_ID).status == "cancelled"
    assert shape == [
        ("0", STEP, "flight"),
        ("1", STEP, "hotel"),
        ("2", HALT, "durably.cancel"),
        ("3", COMPENSATE, "durably.compensate"),
        ("4", STEP, "undo:hotel"),
        ("5", STEP, "undo:flight"),
    ]
