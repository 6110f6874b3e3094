"""Running the crash tests' agent scripts as real subprocesses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any


def run_script(
    script: Path, tmp: Path, run_id: str, *extra: str
) -> subprocess.CompletedProcess[str]:
    """Run ``script JOURNAL_URL WORLD_DB RUN_ID *extra`` on ``tmp``'s journal and world."""
    return subprocess.run(
        [
            sys.executable,
            str(script),
            f"sqlite:///{tmp / 'journal.db'}",
            str(tmp / "world.db"),
            run_id,
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def spawn_script(script: Path, tmp: Path, run_id: str, *extra: str) -> subprocess.Popen[str]:
    """Start ``script JOURNAL_URL WORLD_DB RUN_ID *extra`` (as :func:`run_script`) and
    return the running process."""
    return subprocess.Popen(
        [
            sys.executable,
            str(script),
            f"sqlite:///{tmp / 'journal.db'}",
            str(tmp / "world.db"),
            run_id,
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def killed(script: Path, env: dict[str, str], *args: str) -> None:
    """Run ``script *args`` (its cwd: its folder) and check it died of SIGKILL."""
    import signal

    done = subprocess.run(
        [sys.executable, str(script), *args],
        env=env,
        cwd=script.parent,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr


def runs_listed(tmp: Path, *args: str) -> list[dict[str, Any]]:
    """``durably runs list --json *args`` on ``tmp``'s journal, run as a real command."""
    listed = subprocess.run(
        [
            sys.executable,
            "-m",
            "durably.cli",
            "runs",
            "list",
            "--json",
            *args,
            "--db",
            f"sqlite:///{tmp / 'journal.db'}",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    runs: list[dict[str, Any]] = json.loads(listed.stdout)
    return runs


def kill_at_marker(proc: subprocess.Popen[str], marker: Path, timeout_s: float = 30) -> None:
    """SIGKILL ``proc`` once it has created ``marker`` (where it hangs), and check it died
    of the signal (not of an error of its own first)."""
    import signal
    import time

    try:
        deadline = time.monotonic() + timeout_s
        while not marker.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, f"{marker} never appeared"
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=10)
    assert proc.returncode == -signal.SIGKILL
