"""A real SIGKILL during an approval's expiry: the expiry branch runs once.

The request expires (nobody approves within its one-second timeout) and its
``on_timeout`` callable runs as the recorded step ``on_timeout:refund``. The agent kills
itself first after the store took the expiry but before that step ran, then after the
step's result committed; each restart replays. The store's row says ``expired`` once
(one ``approval.decided`` event), the history records the expiry, and every effect ran
exactly once, as counted in a separate world database.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

AGENT = Path(__file__).with_name("approval_agent.py")
RUN_ID = "refund-1"


def agent(tmp: Path, kill_window: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            str(AGENT),
            f"sqlite:///{tmp / 'journal.db'}",
            str(tmp / "world.db"),
            RUN_ID,
            kill_window,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def executions(tmp: Path) -> list[str]:
    with closing(sqlite3.connect(tmp / "world.db")) as w:
        return [r[0] for r in w.execute("SELECT step FROM executions ORDER BY rowid")]


def journal(tmp: Path, sql: str) -> list[tuple[object, ...]]:
    with closing(sqlite3.connect(tmp / "journal.db", timeout=10)) as j:
        return list(j.execute(sql, (RUN_ID,)))


def test_sigkill_during_the_expiry_takes_the_expiry_branch_once(tmp_path: Path) -> None:
    # 1. Killed after the store took the expiry, before the on_timeout step ran.
    first = agent(tmp_path, "before")
    assert first.returncode == -signal.SIGKILL, first.stderr
    assert executions(tmp_path) == ["plan"]
    [(outcome, decided_at, expires_at)] = journal(
        tmp_path, "SELECT outcome, decided_at, expires_at FROM approvals WHERE run_id = ?"
    )
    assert outcome == "expired" and decided_at == expires_at
    # Nothing of the branch is in the history yet: the request still reads "waiting".
    assert journal(tmp_path, "SELECT position, status FROM steps WHERE run_id = ? ORDER BY 1") == [
        ("0", "ok"),
        ("1", "waiting"),
    ]

    # 2. Killed after the on_timeout step's result committed (with the expired decision).
    second = agent(tmp_path, "recorded")
    assert second.returncode == -signal.SIGKILL, second.stderr
    assert executions(tmp_path) == ["plan", "escalate"]
    steps = journal(tmp_path, "SELECT position, name, status, output FROM steps WHERE run_id = ?")
    by_pos = {str(p): (n, s, o) for p, n, s, o in steps}
    assert by_pos["1"][:2] == ("request_approval:refund", "ok")
    assert json.loads(str(by_pos["1"][2]))["outcome"] == "expired"
    assert by_pos["2"][:2] == ("on_timeout:refund", "ok")

    # 3. Runs to the end: the branch replays, nothing runs twice.
    third = agent(tmp_path, "none")
    assert third.returncode == 0, third.stderr
    assert json.loads(third.stdout) == {
        "outcome": "expired",
        "value": "escalate done",
        "notified": "notify expired done",
    }
    assert executions(tmp_path) == ["plan", "escalate", "notify expired"]
    decided = journal(
        tmp_path, "SELECT count(*) FROM events WHERE run_id = ? AND kind = 'approval.decided'"
    )
    assert decided == [(1,)]
    assert journal(tmp_path, "SELECT status FROM runs WHERE run_id = ?") == [("completed",)]
