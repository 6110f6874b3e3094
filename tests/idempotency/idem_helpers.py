"""Helpers shared by the idempotency tests (a distinct module name, to avoid clashes)."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
HERE = Path(__file__).resolve().parent
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


class FakeClock:
    """Epoch seconds that move only when a test says so."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds``."""
        self.now += seconds


def subprocess_env() -> dict[str, str]:
    """The environment for child processes: this checkout's src and examples importable."""
    env = dict(os.environ)
    parts = [str(SRC), str(EXAMPLES), str(HERE), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in parts if p)
    return env


def count_lines(path: Path) -> int:
    """Count the effect marks a test's functions appended to ``path``."""
    return len(path.read_text().splitlines()) if path.exists() else 0


def count_rows(db_path: Path, table: str) -> int:
    """Count rows in a table of a SQLite file that is not the store under test."""
    with sqlite3.connect(db_path) as conn:
        return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
