"""Real SIGKILLs around a signal wait, and real ``durably signal`` commands.

The agent's process is killed while ``engine.run`` waits for a parked run (it held no
lease: the run is a row), two signals are sent with the CLI, and a restart is killed
again after the wait took the first signal but before anything recorded it. The last
restart gets that same first signal (never the second), every effect ran once (counted
in a separate world database), and the second signal is still there for a later wait.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

from .scripts import run_script

AGENT = Path(__file__).with_name("signal_agent.py")
RUN_ID = "change-9"


def journal(tmp: Path, sql: str) -> list[tuple[object, ...]]:
    if not (tmp / "journal.db").exists():
        return []
    with closing(sqlite3.connect(tmp / "journal.db", timeout=10)) as j:
        try:
            return j.execute(sql, (RUN_ID,)).fetchall()
        except sqlite3.OperationalError:
            return []  # the schema is still being created


def executions(tmp: Path) -> list[str]:
    with closing(sqlite3.connect(tmp / "world.db")) as w:
        return [r[0] for r in w.execute("SELECT step FROM executions ORDER BY rowid")]


def cli_signal(tmp: Path, data: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "durably.cli", "signal", RUN_ID, "approve", "--data", data],
        env={"DURABLY_URL": f"sqlite:///{tmp / 'journal.db'}", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.strip()


def test_sigkills_around_a_signal_wait_consume_the_first_signal_once(tmp_path: Path) -> None:
    first = subprocess.Popen(
        [
            sys.executable,
            str(AGENT),
            f"sqlite:///{tmp_path / 'journal.db'}",
            str(tmp_path / "world.db"),
            RUN_ID,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    status_sql = "SELECT status, owner, wake_at, park_reason FROM runs WHERE run_id = ?"
    try:
        deadline = time.monotonic() + 30
        while [r[0] for r in journal(tmp_path, status_sql)] != ["parked"]:
            assert first.poll() is None, first.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.02)
        ((_, owner, wake_at, reason),) = journal(tmp_path, status_sql)
        assert owner is None  # a row: no lease held while the process waits
        assert isinstance(wake_at, float) and wake_at > time.time() + 500  # the timeout
        assert isinstance(reason, str) and reason.startswith("signal 'approve' since ")
        first.send_signal(signal.SIGKILL)
    finally:
        if first.poll() is None:
            first.kill()
        first.communicate(timeout=10)
    assert first.returncode == -signal.SIGKILL

    assert cli_signal(tmp_path, '{"by": "ana"}') == f"signal approve #1 sent to {RUN_ID}"
    assert cli_signal(tmp_path, '{"by": "bob"}') == f"signal approve #2 sent to {RUN_ID}"
    # Due at once: a signal of the name it waits for came.
    ((status, _, wake_at, _),) = journal(tmp_path, status_sql)
    assert status == "parked" and isinstance(wake_at, float) and wake_at <= time.time()

    # Killed after the wait took signal #1, before the wait's record was written.
    killed = run_script(AGENT, tmp_path, RUN_ID, "2:before")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    signals_sql = "SELECT seq, consumed_by FROM signals WHERE run_id = ? ORDER BY seq"
    assert journal(tmp_path, signals_sql) == [(1, "1"), (2, None)]
    steps_sql = "SELECT position, status FROM steps WHERE run_id = ? ORDER BY position"
    assert journal(tmp_path, steps_sql) == [("0", "ok"), ("1", "waiting")]

    done = run_script(AGENT, tmp_path, RUN_ID)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["decision"] == {"by": "ana"}  # the first signal, taken once
    assert result["posted"] == "post_status done ({'by': 'ana'})"
    assert executions(tmp_path) == ["open_ticket", "post_status"]  # each effect once
    assert journal(tmp_path, signals_sql) == [(1, "1"), (2, None)]  # #2 waits for a wait
    assert journal(tmp_path, steps_sql) == [("0", "ok"), ("1", "ok"), ("2", "ok")]
