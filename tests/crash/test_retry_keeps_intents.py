"""A person's retry of a blocked or quarantined run must not repeat an effect in doubt.

A wire transfer without a key or a reconcile is SIGKILLed after it happened and before it
was recorded; the run then blocks (a deploy renamed the step) or is quarantined (it kept
dying). Fixing that and running ``durably retry`` must bring the transfer back to the
person as ``in_doubt``, never send the money again. Only ``durably retry`` of the
``in_doubt`` run itself, the person's decision about that transfer, runs it again.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from .scripts import run_script

AGENT = Path(__file__).with_name("wire_agent.py")
RUN_ID = "payout-7"


def agent(tmp: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_script(AGENT, tmp, RUN_ID, *extra)


def durably_cli(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "durably.cli", *args, "--db", f"sqlite:///{tmp / 'journal.db'}"],
        capture_output=True,
        text=True,
        timeout=60,
    )


def transfers(tmp: Path) -> int:
    with sqlite3.connect(tmp / "world.db") as w:
        return int(w.execute("SELECT count(*) FROM transfers").fetchone()[0])


def status(tmp: Path) -> str:
    with sqlite3.connect(tmp / "journal.db") as j:
        return str(j.execute("SELECT status FROM runs").fetchone()[0])


@pytest.mark.parametrize(
    ("stuck", "how", "code"),
    [("blocked", ("--renamed",), 4), ("quarantined", ("--max-starts", "1"), 5)],
)
def test_retry_of_a_stuck_run_never_repeats_an_effect_in_doubt(
    tmp_path: Path, stuck: str, how: tuple[str, ...], code: int
) -> None:
    killed = agent(tmp_path, "--kill")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert transfers(tmp_path) == 1  # the money left; the journal only has the intent
    got = agent(tmp_path, *how)
    assert got.returncode == code, got.stdout + got.stderr
    assert status(tmp_path) == stuck
    retried = durably_cli(tmp_path, "retry", RUN_ID)  # the cause is fixed: try again
    assert retried.returncode == 0, retried.stderr
    resumed = agent(tmp_path)
    assert resumed.returncode == 3, resumed.stdout + resumed.stderr
    assert "'wire'" in json.loads(resumed.stdout)["in_doubt"]
    assert transfers(tmp_path) == 1  # never sent twice behind the person's back
    assert status(tmp_path) == "in_doubt"
    # The person checked the bank: it did not arrive. Their retry of the doubt sends it.
    assert durably_cli(tmp_path, "retry", RUN_ID).returncode == 0
    done = agent(tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == "told the customer: wired 1000"
    assert transfers(tmp_path) == 2
