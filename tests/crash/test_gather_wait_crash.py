"""A real SIGKILL while a run is parked on two timers of one ``ctx.gather`` (the step
beside them already ran) and ``engine.run`` waits in-process.

Restarted (asking for ten minutes), ``engine.run`` resumes both timers at the wake times
they recorded, not fresh ones and not one after the other, and finishes; every effect
ran once, as counted in a separate world database.
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

AGENT = Path(__file__).with_name("gather_wait_agent.py")
RUN_ID = "two-timers-1"
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


def test_sigkill_while_parked_on_two_timers_resumes_both_at_their_recorded_times(
    tmp_path: Path,
) -> None:
    first = agent(tmp_path, SLEEP_S)
    try:
        deadline = time.monotonic() + 30
        row = run_row(tmp_path)
        while row is None or row[0] != "parked":
            assert first.poll() is None, first.communicate()
            assert time.monotonic() < deadline, row
            time.sleep(0.02)
            row = run_row(tmp_path)
        _, wake_at, reason, owner = row
        assert wake_at is not None and wake_at > time.time()
        assert owner is None
        assert reason is not None and reason.startswith("2 waits: timer until ")
        first.send_signal(signal.SIGKILL)
    finally:
        if first.poll() is None:
            first.kill()
        first.communicate(timeout=10)
    assert first.returncode == -signal.SIGKILL
    assert executions(tmp_path) == ["draft"]  # ran beside the timers, before the park

    second = agent(tmp_path, 600.0)  # asks for ten minutes: the recorded times win
    out, err = second.communicate(timeout=60)
    finished = time.time()
    assert second.returncode == 0, err
    # Done after the later timer (1 s after the earlier one), not after their sum.
    assert wake_at + 1 <= finished < wake_at + 1 + 15
    result = json.loads(out)
    assert result["drafted"] == "draft done" and result["posted"] == "post done"
    assert SLEEP_S + 1 <= result["slept_s"] < SLEEP_S + 1 + 15
    assert executions(tmp_path) == ["draft", "post"]  # each effect once
    with closing(sqlite3.connect(tmp_path / "journal.db")) as j:
        wakes = sorted(
            json.loads(o)["wake_at"]
            for (o,) in j.execute(
                "SELECT output FROM steps WHERE run_id = ? AND kind = 'sleep'", (RUN_ID,)
            )
        )
    # Each recorded when first reached (a moment apart), the earlier being the run's.
    assert wakes[0] == wake_at and wake_at + 1 <= wakes[1] < wake_at + 1.5
