"""A real SIGKILL between two ``ctx.branches`` branches' steps (threads, as LangChain's
sync agents run tools): the next process replays what each branch recorded, runs only
what never ran, and every step's idempotency key is the one its position gives.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path

from durably.history import idempotency_key

from .scripts import kill_at_marker, spawn_script

AGENT = Path(__file__).with_name("branches_agent.py")
RUN_ID = "tools-1"


def agent(tmp: Path, hang: bool) -> subprocess.Popen[str]:
    return spawn_script(AGENT, tmp, RUN_ID, str(tmp / "hanging"), "1" if hang else "0")


def test_sigkill_between_branch_steps_runs_each_step_once_with_stable_keys(
    tmp_path: Path,
) -> None:
    kill_at_marker(agent(tmp_path, hang=True), tmp_path / "hanging")
    with sqlite3.connect(tmp_path / "world.db") as wdb:
        before = sorted(wdb.execute("SELECT step, key FROM executions").fetchall())
    assert [s for s, _ in before] == ["fetch", "read", "search"]
    # No wait for the dead process's lease: its pid is gone, the next claim takes it over.
    second = agent(tmp_path, hang=False)
    out, err = second.communicate(timeout=60)
    assert second.returncode == 0, err
    assert json.loads(out) == [
        "search@0.0.0+search_more@0.0.1",
        "fetch@0.1.0+read@0.1.1",
        "answer",
    ]
    with sqlite3.connect(tmp_path / "journal.db") as j:
        (incarnation,) = j.execute(
            "SELECT incarnation FROM runs WHERE run_id = ?", (RUN_ID,)
        ).fetchone()
    with sqlite3.connect(tmp_path / "world.db") as wdb:
        after = sorted(wdb.execute("SELECT step, key FROM executions").fetchall())
    positions = {"search": "0.0.0", "search_more": "0.0.1", "fetch": "0.1.0", "read": "0.1.1"}
    assert after == sorted(
        (name, idempotency_key(RUN_ID, incarnation, pos)) for name, pos in positions.items()
    )  # each step ran once, under the key of its position
