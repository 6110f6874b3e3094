"""The SIGKILL crash harness the framework adapters' crash tests share (LangChain's
``DurablyMiddleware``, Pydantic AI's ``DurableAgent``).

Each adapter has an ``agent_app.py`` of its own (the framework's agent, a model of the
test's own that counts its calls) run as its own process:
``python -m tests.integration.<adapter>.agent_app JOURNAL_URL WORLD_DB RUN_ID SCENARIO
[KILL_AT]``. What is the same for every adapter lives here, in two halves:

- the app's: the world database (``model_calls``, ``attempts`` keeps every execution of
  a tool, ``effects`` one row per idempotency key as a service that honours keys would,
  ``started``), the tool's write with its kill points (:func:`tool_writer`) and the
  app's ``main``;
- the test's: run the app (:func:`run_app`), read the world, the uncrashed control runs
  (:func:`control_runs`) and the checks of the two crash tests, so that every adapter is
  held to the same assertions at the same kill points.

Kill points (``KILL_AT``): ``after-model`` (SIGKILL at the tool's start: turn 1 is
recorded, the write is not done), ``after-write`` (SIGKILL inside the tool right after
its write), ``between`` (the parallel scenario: the call for "b" waits until the call
for "a" is recorded, then SIGKILLs the process before its own write; "a" waits for "b"
to have started, so the two are in flight at once).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Collection
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

import durably

WAIT_S_MAX = 30.0
ROOT = Path(__file__).resolve().parents[2]  # the checkout: ``python -m tests...`` runs here
RUN_ID = "shop-1"
PROMPT = "order please"

# -- the app's half -----------------------------------------------------------------------


def world(path: str) -> sqlite3.Connection:
    """The world database (created on first use), outside the journal."""
    w = sqlite3.connect(path, timeout=30, isolation_level=None)
    w.executescript(
        "CREATE TABLE IF NOT EXISTS model_calls (turn INTEGER, pid INTEGER);"
        "CREATE TABLE IF NOT EXISTS attempts (tool TEXT, item TEXT, key TEXT, pid INTEGER);"
        "CREATE TABLE IF NOT EXISTS effects (key TEXT PRIMARY KEY, tool TEXT, item TEXT);"
        "CREATE TABLE IF NOT EXISTS started (item TEXT, pid INTEGER);"
    )
    return w


def count_model_call(world_db: str, turn: int) -> None:
    """The model's side of the world: one row per call, with the turn it answered."""
    with closing(world(world_db)) as w:
        w.execute("INSERT INTO model_calls VALUES (?, ?)", (turn, os.getpid()))


def tool_writer(
    engine: durably.Engine,
    world_db: str,
    scenario: str,
    kill_at: str | None,
    *,
    parallel: Collection[str],
    recorded_name: str,
) -> Callable[[str, str], str]:
    """The body of the app's tools: ``write(tool, item)`` writes to the world under the
    step's idempotency key, SIGKILLing the process at ``kill_at``. ``parallel`` names the
    scenarios whose two calls run at once; ``recorded_name`` is the step name the
    adapter records the tool ``record_order`` under (``between`` waits for its record)."""

    def write(tool: str, item: str) -> str:
        info = durably.current_step()
        assert info is not None, "a recorded tool runs inside its step"
        if kill_at == "after-model":
            os.kill(os.getpid(), signal.SIGKILL)
        if scenario in parallel:
            with closing(world(world_db)) as w:
                w.execute("INSERT INTO started VALUES (?, ?)", (item, os.getpid()))
            if item == "a":  # both calls are in flight at once: the framework's own
                wait_started(world_db, "b")
        if kill_at == "between" and item == "b":
            wait_recorded(engine, info.run_id, recorded_name)
            os.kill(os.getpid(), signal.SIGKILL)
        with closing(world(world_db)) as w:
            w.execute(
                "INSERT INTO attempts VALUES (?, ?, ?, ?)",
                (tool, item, info.idempotency_key, os.getpid()),
            )
            w.execute(
                "INSERT INTO effects VALUES (?, ?, ?) ON CONFLICT(key) DO NOTHING",
                (info.idempotency_key, tool, item),
            )
        if kill_at == "after-write":
            os.kill(os.getpid(), signal.SIGKILL)
        return f"{tool} {item} ok"

    return write


def wait_started(world_db: str, item: str) -> None:
    """Until the tool call for ``item`` has started in this process."""
    deadline = time.monotonic() + WAIT_S_MAX
    while time.monotonic() < deadline:
        with closing(world(world_db)) as w:
            if w.execute(
                "SELECT 1 FROM started WHERE item = ? AND pid = ?", (item, os.getpid())
            ).fetchone():
                return
        time.sleep(0.01)
    raise TimeoutError(f"the call for {item!r} never started while the other ran")


def wait_recorded(engine: durably.Engine, run_id: str, name: str) -> None:
    """Until a step named ``name`` has its result recorded (a committed event)."""
    deadline = time.monotonic() + WAIT_S_MAX
    while time.monotonic() < deadline:
        page = engine.events(run_id)
        if any(e.kind == "step.completed" and e.data.get("name") == name for e in page.events):
            return
        time.sleep(0.01)
    raise TimeoutError(f"{name} was never recorded")


Build = Callable[[str, str, str, "str | None"], tuple[durably.Engine, durably.Workflow]]


def run_workflow(engine: durably.Engine, wf: durably.Workflow, run_id: str) -> Any:
    """Run the app's workflow to its end here: ``engine.run_async`` for an ``async def``
    workflow (an adapter's async agent), ``engine.run`` otherwise."""
    if wf.is_async:
        import asyncio

        return asyncio.run(engine.run_async(wf, PROMPT, run_id=run_id))
    return engine.run(wf, PROMPT, run_id=run_id)


def main(build: Build) -> None:
    """The app's command line: ``JOURNAL_URL WORLD_DB RUN_ID SCENARIO [KILL_AT]``; prints
    the workflow's result as JSON."""
    url, world_db, run_id, scenario = sys.argv[1:5]
    kill_at = sys.argv[5] if len(sys.argv) > 5 else None
    engine, wf = build(url, world_db, scenario, kill_at)
    try:
        print(json.dumps(run_workflow(engine, wf, run_id)), flush=True)
    finally:
        engine.close()


# -- the test's half ----------------------------------------------------------------------


def app_command(module: str, tmp: Path, run_id: str, scenario: str, *kill: str) -> list[str]:
    """The command line of the app ``module`` (``tests.integration.<adapter>.agent_app``)
    on ``tmp``'s journal and world; run it with ``cwd=ROOT``."""
    journal, world_db = f"sqlite:///{tmp / 'journal.db'}", str(tmp / "world.db")
    return [sys.executable, "-m", module, journal, world_db, run_id, scenario, *kill]


def run_app(
    module: str, tmp: Path, scenario: str, *kill: str, run_id: str = RUN_ID
) -> subprocess.CompletedProcess[str]:
    """Run the app to its end (or its SIGKILL)."""
    return subprocess.run(
        app_command(module, tmp, run_id, scenario, *kill),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


def rows(tmp: Path, sql: str) -> list[tuple[Any, ...]]:
    """Rows of ``tmp``'s world."""
    with closing(sqlite3.connect(tmp / "world.db")) as w:
        return list(w.execute(sql))


def model_turns(tmp: Path) -> list[int]:
    """The turns the model was asked, in order (a turn asked again shows twice)."""
    return [t for (t,) in rows(tmp, "SELECT turn FROM model_calls ORDER BY rowid")]


def tail(key: str) -> str:
    """The position at the end of an idempotency key."""
    return key.rsplit(":", 1)[1]


def control_runs(tmp_path_factory: pytest.TempPathFactory, build: Build) -> dict[str, Any]:
    """Uncrashed runs of both scenarios (the same app, in this process): their answers
    and the positions of their keys (for a module-scoped ``control`` fixture)."""
    out: dict[str, Any] = {}
    for scenario in ("single", "parallel"):
        tmp = tmp_path_factory.mktemp(scenario)
        engine, wf = build(f"sqlite:///{tmp / 'journal.db'}", str(tmp / "world.db"), scenario, None)
        try:
            answer = run_workflow(engine, wf, RUN_ID)
        finally:
            engine.close()
        keys = rows(tmp, "SELECT item, key FROM attempts ORDER BY item")
        out[scenario] = (answer, [(i, tail(k)) for i, k in keys])
        assert model_turns(tmp) == [1, 2]
    # The calls' positions follow the order the model listed them (branch 0, then 1).
    assert out["parallel"][1] == [("a", "1.0.0"), ("b", "1.1.0")]
    return out


def check_a_killed_run_resumes(
    module: str, tmp_path: Path, kill_at: str, control: dict[str, Any]
) -> None:
    """Killed at ``kill_at`` (``after-model`` or ``after-write``), the resumed run asks
    the model nothing it was already asked, the world holds the write once under an
    unchanged key, and the answer is the uncrashed run's."""
    killed = run_app(module, tmp_path, "single", kill_at)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert model_turns(tmp_path) == [1]
    resumed = run_app(module, tmp_path, "single")
    assert resumed.returncode == 0, resumed.stderr
    # Turn 1 was recorded before the kill: the resumed run replayed it, never re-asked.
    assert model_turns(tmp_path) == [1, 2]
    attempts = rows(tmp_path, "SELECT item, key, pid FROM attempts ORDER BY rowid")
    # after-write: the tool ran again after the crash (at least once), under its key.
    assert len(attempts) == (1 if kill_at == "after-model" else 2)
    assert len({k for _, k, _ in attempts}) == 1
    [(key, item)] = rows(tmp_path, "SELECT key, item FROM effects")
    assert item == "a" and key == attempts[0][1]
    answer, keys = control["single"]
    assert json.loads(resumed.stdout) == answer == "done: record_order a ok"
    assert [(item, tail(key))] == keys


def check_parallel_calls_killed_between_them(
    module: str, tmp_path: Path, control: dict[str, Any]
) -> None:
    """Two tool calls in flight at once, killed between them (``between``): each runs
    once, at the positions of the uncrashed run."""
    killed = run_app(module, tmp_path, "parallel", "between")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    first = rows(tmp_path, "SELECT item, key, pid FROM attempts ORDER BY rowid")
    assert [i for i, _, _ in first] == ["a"]  # "b" died before its write
    resumed = run_app(module, tmp_path, "parallel")
    assert resumed.returncode == 0, resumed.stderr
    after = rows(tmp_path, "SELECT item, key, pid FROM attempts ORDER BY rowid")
    # "a" was recorded before the kill: replayed, not run again; "b" ran once, now.
    assert after[:1] == first and [i for i, _, _ in after[1:]] == ["b"]
    assert after[1][2] != first[0][2]
    answer, keys = control["parallel"]
    # Positions follow the order the model listed the calls, as in the uncrashed run.
    assert sorted((i, tail(k)) for i, k, _ in after) == keys
    assert rows(tmp_path, "SELECT item FROM effects ORDER BY item") == [("a",), ("b",)]
    assert model_turns(tmp_path) == [1, 2]
    assert json.loads(resumed.stdout) == answer
