"""Real SIGKILLs around ``ctx.continue_as_new``'s hand-over, on SQLite and PostgreSQL.

One run is killed before the hand-over (generation 0's last step recorded), inside its
transaction (every statement run, the commit not), and after it (generation 1 begun,
its first step not): each restart finds exactly one next generation or none, and the
last finishes with every mailbox item handled once under a key no other item had.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest

import durably

AGENT = Path(__file__).with_name("continue_agent.py")
RUN_ID = "mailbox-1"


def _agent(url: str, tmp: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(AGENT), url, str(tmp / "world.db"), RUN_ID, *extra],
        capture_output=True,
        text=True,
        timeout=60,
    )


def _state(url: str) -> tuple[int, list[int], int]:
    """The run's generation, its finished generations, and its run.continued events."""
    engine = durably.Engine(url)
    try:
        run = engine.store.get_run(RUN_ID)
        assert run is not None
        gens = [g.generation for g in engine.store.list_generations(RUN_ID)]
        continued = [e for e in engine.events(RUN_ID).events if e.kind == "run.continued"]
        return run.generation, gens, len(continued)
    finally:
        engine.close()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'journal.db'}"
    return str(request.getfixturevalue("pg_url"))


def test_sigkill_before_inside_and_after_the_hand_over(url: str, tmp_path: Path) -> None:
    before = _agent(url, tmp_path, "2:recorded")
    assert before.returncode == -signal.SIGKILL, before.stderr
    assert _state(url) == (0, [], 0)  # nothing handed over

    inside = _agent(url, tmp_path, "inside")
    assert inside.returncode == -signal.SIGKILL, inside.stderr
    assert _state(url) == (0, [], 0)  # the transaction never committed: still none

    after = _agent(url, tmp_path, "g1.0:before")
    assert after.returncode == -signal.SIGKILL, after.stderr
    assert _state(url) == (1, [0], 1)  # exactly one next generation

    done = _agent(url, tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [f"item {i} done" for i in range(7)]
    assert _state(url) == (2, [0, 1], 2)
    with closing(sqlite3.connect(tmp_path / "world.db")) as w:
        rows = w.execute("SELECT item, key FROM executions ORDER BY rowid").fetchall()
    assert [item for item, _ in rows] == list(range(7))  # no effect twice
    keys = [key for _, key in rows]
    assert len(set(keys)) == 7  # no key repeated
    assert [k.rsplit(":", 1)[1] for k in keys] == ["0", "1", "2", "g1.0", "g1.1", "g1.2", "g2.0"]
