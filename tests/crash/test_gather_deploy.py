"""A real SIGKILL, then a deploy that shifts a gather of effects: no branch goes live.

The agent (deploy_agent.py) is killed inside or right after its gather of two effects;
the next process runs changed code whose gather sits one position later. Its branches
would get new idempotency keys, which the receiving side cannot deduplicate (a second
charge). The gather's record, written with the first branch's effect intent, makes the
changed code stop before any branch runs: the run is blocked, the world untouched, and
the old code (a rollback) then finishes the run with every effect exactly once.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from durably.history import idempotency_key

AGENT = Path(__file__).with_name("deploy_agent.py")
RUN_ID = "order-7"


def run_agent(tmp: Path, version: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            str(AGENT),
            f"sqlite:///{tmp / 'journal.db'}",
            str(tmp / "world.db"),
            RUN_ID,
            "--version",
            version,
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def executions(tmp: Path) -> list[tuple[str, str]]:
    """Every call of an effect function, with the key it carried."""
    with sqlite3.connect(tmp / "world.db") as w:
        return sorted(w.execute("SELECT step, key FROM executions").fetchall())


def key(tmp: Path, position: str) -> str:
    """The idempotency key of ``position`` in the run (built from its incarnation)."""
    with sqlite3.connect(tmp / "journal.db") as j:
        (incarnation,) = j.execute(
            "SELECT incarnation FROM runs WHERE run_id = ?", (RUN_ID,)
        ).fetchone()
    return idempotency_key(RUN_ID, incarnation, position)


def run_status(tmp: Path) -> str:
    with sqlite3.connect(tmp / "journal.db") as j:
        (status,) = j.execute("SELECT status FROM runs WHERE run_id = ?", (RUN_ID,)).fetchone()
    return str(status)


@pytest.mark.parametrize(
    "kill",
    [
        "1.0.0:effect",  # the charge happened, its result was not recorded
        "1.1.0:recorded",  # both effects recorded, the gather not yet returned
        "2:before",  # the gather finished
    ],
)
def test_a_deploy_that_shifts_a_gather_runs_no_branch_live(tmp_path: Path, kill: str) -> None:
    killed = run_agent(tmp_path, "v1", "--kill", kill)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    before = executions(tmp_path)
    assert ("charge", key(tmp_path, "1.0.0")) in before

    deployed = run_agent(tmp_path, "v2")
    assert deployed.returncode == 4, deployed.stderr
    assert executions(tmp_path) == before  # no branch ran, under old keys or new
    reason = json.loads(deployed.stdout)["blocked"]
    assert "step 1: history has 'durably.gather'" in reason
    assert run_status(tmp_path) == "blocked"

    rolled_back = run_agent(tmp_path, "v1")
    assert rolled_back.returncode == 0, rolled_back.stderr
    result = json.loads(rolled_back.stdout)
    assert result["charged"] == f"charge@{key(tmp_path, '1.0.0')}"
    assert result["shipped"] == f"ship@{key(tmp_path, '1.1.0')}"
    keys = {k for _, k in executions(tmp_path)}
    old_keys = {key(tmp_path, "1.0.0"), key(tmp_path, "1.1.0")}
    assert keys == old_keys  # never a key of the shifted gather
    with sqlite3.connect(tmp_path / "world.db") as w:
        rows = w.execute("SELECT kind, count(*) FROM effects GROUP BY kind").fetchall()
    assert sorted(rows) == [("charge", 1), ("ship", 1)]  # each effect landed exactly once
