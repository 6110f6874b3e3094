"""Helpers shared by the CLI tests: a real ``durably worker`` subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def start_worker(
    target: str, env: dict[str, str], cwd: Path | None = None, *extra: str
) -> subprocess.Popen[str]:
    """``durably worker TARGET`` in a subprocess, stdout and stderr piped as text."""
    return subprocess.Popen(
        [sys.executable, "-m", "durably.cli", "worker", target, *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=cwd,
    )
