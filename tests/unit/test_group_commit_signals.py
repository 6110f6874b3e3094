"""Group commit under a flood of real SIGINTs (a KeyboardInterrupt can be raised in the
main thread as almost any call begins or returns, including while it leads a batch, is
told to lead, or gives back what it held after a first interrupt): the writer is never
left held by a caller that left, no transaction stays open, and every other thread's
call goes through. A child process takes the signals (tests/unit/sigint_child.py).

The bounded form runs in the suite; ``DURABLY_SIGINT_STRESS_S=120`` runs it longer (the
hang this guards against, fixed with the per-caller waiters' give-back, showed about
once a minute of such a flood)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

CHILD = Path(__file__).with_name("sigint_child.py")


def test_a_flood_of_sigints_never_leaves_the_writer_held(tmp_path: Path) -> None:
    seconds = float(os.environ.get("DURABLY_SIGINT_STRESS_S", "4"))
    done = subprocess.run(
        [sys.executable, str(CHILD), str(tmp_path / "j.db"), str(seconds), "6"],
        capture_output=True,
        text=True,
        timeout=seconds + 60,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert lines, f"the child printed no report (exit {done.returncode}): {done.stderr[-2000:]}"
    report = json.loads(lines[-1])
    assert not report["stuck"], f"the writer was left held: {report}"
    assert done.returncode == 0, done.stderr[-2000:]
    assert report["leaked"] == 0, f"a transaction was left open after an interrupt: {report}"
    assert report["error_count"] == 0, report["errors"]
    assert not report["busy_after"] and report["queued_after"] == 0
    assert report["interrupts"] > 50, report  # the flood did reach the main thread
