"""Real crashes for two guarantees that also have unit tests (tests/unit/test_replay.py):
every attempt of a step carries one idempotency key, across retries and across a SIGKILL;
and a step whose input changed under a running run is caught as NonDeterminism."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
from pathlib import Path

from .scripts import run_script, runs_listed

AGENT = Path(__file__).with_name("retry_agent.py")


def run_agent(tmp: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_script(AGENT, tmp, "pay-1", *extra)


def world(tmp: Path, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(tmp / "world.db") as w:
        return w.execute(sql).fetchall()


def test_one_key_across_retries_and_a_sigkill_and_the_receiver_charges_once(
    tmp_path: Path,
) -> None:
    # Attempt 1 fails (connection reset), attempt 2 is charged by the receiver and the
    # process dies before recording it; the resumed process's attempt 3 must carry the
    # same key, so the receiver answers with the stored charge instead of charging again.
    killed = run_agent(tmp_path, "--kill-on-attempt", "2")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    resumed = run_agent(tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout) == {"charge": "ch_42"}
    attempts = world(tmp_path, "SELECT key, pid FROM attempts WHERE step='charge'")
    assert len(attempts) == 3 and len({pid for _, pid in attempts}) == 2
    assert len({key for key, _ in attempts}) == 1, attempts
    [(plan_key,)] = world(tmp_path, "SELECT key FROM attempts WHERE step='plan'")
    assert plan_key != attempts[0][0]  # keys are per position, not per run
    assert world(tmp_path, "SELECT key, amount FROM charges") == [(attempts[0][0], 42)]


def test_changed_step_input_after_a_crash_is_nondeterminism(tmp_path: Path) -> None:
    # The plan is recorded, then the process dies inside the charge; the code that
    # resumes the run passes the plan another input: caught, nothing runs, run blocked.
    killed = run_agent(tmp_path, "--kill-on-attempt", "2")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    changed = run_agent(tmp_path, "--note", " (v2)")
    assert changed.returncode == 4, changed.stderr
    message = json.loads(changed.stdout)["nondeterminism"]
    assert "step 0: history has 'plan'" in message and "inputs differ" in message
    assert world(tmp_path, "SELECT count(*) FROM attempts") == [(3,)]  # nothing re-ran
    assert [(r["run_id"], r["status"]) for r in runs_listed(tmp_path)] == [("pay-1", "blocked")]
    # The original code resumes it: the charge replays from the receiver, once.
    fixed = run_agent(tmp_path)
    assert fixed.returncode == 0, fixed.stderr
    assert json.loads(fixed.stdout) == {"charge": "ch_42"}
    assert len(world(tmp_path, "SELECT * FROM charges")) == 1
