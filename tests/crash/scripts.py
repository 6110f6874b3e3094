"""Running the crash tests' agent scripts as real subprocesses."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


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
