"""`make demo`: an agent on embedded SQLite is killed with SIGKILL mid-run and resumed.

1. Start the incident agent in a child process.
2. Once it has paged on-call, kill it with a real SIGKILL (mid-way through a model call).
3. Run it again with the same run id: recorded steps replay instantly, the rest go live.
4. Show its journal (``durably runs show``) and the outside world: one ticket, one page.
"""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = Path("demo-output")
RUN_ID = "alert-42"


def agent_cmd(db: str, world: Path) -> list[str]:
    return [
        sys.executable,
        "-u",
        str(HERE / "incident_agent.py"),
        RUN_ID,
        "--db",
        db,
        "--world",
        str(world),
    ]


def main() -> None:
    """Run the demo."""
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir()
    db, world = f"sqlite:///{OUT / 'journal.db'}", OUT / "world.db"

    print("== 1. the agent starts")
    child = subprocess.Popen(agent_cmd(db, world), stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    for line in child.stdout:
        print(line, end="")
        if "page on-call" in line:
            break
    # The agent is now paging on-call or already in turn 4's model call: kill it
    # without warning, wherever it is.
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    print(f"\n== 2. killed pid {child.pid} with SIGKILL (exit {child.returncode})\n")

    print("== 3. the same command again: recorded steps replay, the rest go live")
    subprocess.run(agent_cmd(db, world), check=True)

    print("\n== 4. the journal")
    subprocess.run(
        [sys.executable, "-m", "durably.cli", "runs", "show", RUN_ID, "--db", db], check=True
    )
    with sqlite3.connect(world) as conn:
        rows = conn.execute("SELECT kind, count(*) FROM writes GROUP BY kind ORDER BY kind")
        counts = dict(rows.fetchall())
        retried = conn.execute(
            "SELECT kind, idempotency_key, requests FROM writes WHERE requests > 1"
        ).fetchall()
    print(f"\nthe outside world holds {counts}: each write exactly once.")
    for kind, key, n in retried:
        print(
            f"the kill landed after the {kind} was made but before it was recorded: the"
            f" step ran {n} times with the same key {key}, and the world returned the"
            " first result instead of making another."
        )
    if counts != {"page": 1, "status": 1, "ticket": 1}:
        sys.exit("unexpected: an effect happened twice or not at all")


if __name__ == "__main__":
    main()
