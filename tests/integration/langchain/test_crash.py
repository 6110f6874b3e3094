"""``DurablyMiddleware`` under a real SIGKILL, with a ``BaseChatModel`` of the test's
own counting its calls and a tool writing to a separate SQLite world with its key
(``agent_app.py``): killed (a) after the first model response is recorded and (b)
inside the tool after its write, the resumed run asks the model nothing it was already
asked, the world holds each write once under an unchanged key, and the answer is an
uncrashed run's. Two tool calls LangChain runs on threads at once, killed between
them, run once each at the positions of an uncrashed run. The model gives its tool
calls fresh random ids on every call, so a digest over them would fail the resume."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from .agent_app import build

APP = Path(__file__).with_name("agent_app.py")


def app(tmp: Path, scenario: str, *kill: str, run_id: str = "shop-1") -> Any:
    return subprocess.run(
        [
            sys.executable,
            str(APP),
            f"sqlite:///{tmp / 'journal.db'}",
            str(tmp / "world.db"),
            run_id,
            scenario,
            *kill,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def rows(tmp: Path, sql: str) -> list[tuple[Any, ...]]:
    with closing(sqlite3.connect(tmp / "world.db")) as w:
        return list(w.execute(sql))


def model_turns(tmp: Path) -> list[int]:
    return [t for (t,) in rows(tmp, "SELECT turn FROM model_calls ORDER BY rowid")]


def tail(key: str) -> str:
    return key.rsplit(":", 1)[1]


@pytest.fixture(scope="module")
def control(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Uncrashed runs of both scenarios (the same app, in this process): their answers
    and the positions of their keys."""
    out: dict[str, Any] = {}
    for scenario in ("single", "parallel"):
        tmp = tmp_path_factory.mktemp(scenario)
        engine, shop = build(
            f"sqlite:///{tmp / 'journal.db'}", str(tmp / "world.db"), scenario, None
        )
        try:
            answer = engine.run(shop, "order please", run_id="shop-1")
        finally:
            engine.close()
        keys = rows(tmp, "SELECT item, key FROM attempts ORDER BY item")
        out[scenario] = (answer, [(i, tail(k)) for i, k in keys])
        assert model_turns(tmp) == [1, 2]
    # The calls' positions follow the order the model listed them (branch 0, then 1).
    assert out["parallel"][1] == [("a", "1.0.0"), ("b", "1.1.0")]
    return out


@pytest.mark.parametrize("kill_at", ["after-model", "after-write"])
def test_a_killed_run_resumes_without_asking_the_model_again(
    tmp_path: Path, kill_at: str, control: dict[str, Any]
) -> None:
    killed = app(tmp_path, "single", kill_at)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert model_turns(tmp_path) == [1]
    resumed = app(tmp_path, "single")
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


def test_parallel_tool_calls_killed_between_them_run_once_at_stable_positions(
    tmp_path: Path, control: dict[str, Any]
) -> None:
    killed = app(tmp_path, "parallel", "between")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    first = rows(tmp_path, "SELECT item, key, pid FROM attempts ORDER BY rowid")
    assert [i for i, _, _ in first] == ["a"]  # "b" died before its write
    resumed = app(tmp_path, "parallel")
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
