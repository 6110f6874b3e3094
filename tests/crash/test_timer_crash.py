"""A real SIGKILL while a run is parked on a timer and ``engine.run`` waits in-process.

The killed process held no lease while it waited: the run is a row (``parked``, its wake
time recorded). Restarted, ``engine.run`` waits until that same recorded wake time (not a
fresh sleep: the restart even asks for ten minutes) and finishes; every effect ran once,
as counted in a separate world database.
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

AGENT = Path(__file__).with_name("timer_agent.py")
RUN_ID = "follow-up-1"
SLEEP_S = 2.0  # long enough to see the park and kill the process before it wakes


def agent(tmp: Path, sleep_s: float) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            str(AGENT),
            f"sqlite:///{tmp / 'journal.db'}",
            str(tmp / "world.db"),
            RUN_ID,
            str(sleep_s),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_row(tmp: Path) -> tuple[str, float | None, str | None, str | None] | None:
    if not (tmp / "journal.db").exists():
        return None
    with closing(sqlite3.connect(tmp / "journal.db", timeout=10)) as j:
        try:
            row = j.execute(
                "SELECT status, wake_at, park_reason, owner FROM runs WHERE run_id = ?",
                (RUN_ID,),
            ).fetchone()
        except sqlite3.OperationalError:
            return None  # the schema is still being created
    return None if row is None else (row[0], row[1], row[2], row[3])


def executions(tmp: Path) -> list[str]:
    with closing(sqlite3.connect(tmp / "world.db")) as w:
        return [r[0] for r in w.execute("SELECT step FROM executions ORDER BY rowid")]


def test_sigkill_while_parked_resumes_at_the_recorded_wake_time(tmp_path: Path) -> None:
    first = agent(tmp_path, SLEEP_S)
    try:
        deadline = time.monotonic() + 30
        row = run_row(tmp_path)
        while row is None or row[0] != "parked":
            assert first.poll() is None, first.communicate()
            assert time.monotonic() < deadline, row
            time.sleep(0.02)
            row = run_row(tmp_path)
        status, wake_at, reason, owner = row
        assert wake_at is not None and wake_at > time.time()
        assert owner is None  # parked: no lease held while the process waits
        assert reason is not None and reason.startswith("timer until ")
        first.send_signal(signal.SIGKILL)
    finally:
        if first.poll() is None:
            first.kill()
        first.communicate(timeout=10)  # reaps it and closes its pipes
    assert first.returncode == -signal.SIGKILL
    assert run_row(tmp_path) == (status, wake_at, reason, None)  # the row is the wait
    assert executions(tmp_path) == ["open_ticket"]

    # The restart asks for ten minutes: the run keeps the wake time it recorded.
    second = agent(tmp_path, 600.0)
    out, err = second.communicate(timeout=60)
    finished = time.time()
    assert second.returncode == 0, err
    assert wake_at <= finished < wake_at + 15
    result = json.loads(out)
    assert result["opened"] == "open_ticket done" and result["posted"] == "post_status done"
    # Measured between two recorded clock reads: the first process's, the second's.
    assert SLEEP_S <= result["slept_s"] < SLEEP_S + 15
    assert executions(tmp_path) == ["open_ticket", "post_status"]  # each effect once
    with closing(sqlite3.connect(tmp_path / "journal.db")) as j:
        (output,) = j.execute(
            "SELECT output FROM steps WHERE run_id = ? AND kind = 'sleep' AND status = 'ok'",
            (RUN_ID,),
        ).fetchone()
        (status_now,) = j.execute("SELECT status FROM runs").fetchone()
    assert json.loads(output) == {"wake_at": wake_at} and status_now == "completed"
