"""``durably signal RUN NAME [--data JSON]`` on a real SQLite journal."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import durably
from durably.cli import main


def invoke(*args: str) -> Any:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def _journal(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    with durably.Engine(url) as engine:

        @engine.workflow(name="waits")
        def waits(ctx: durably.Context) -> str:
            return "unused"

        @engine.workflow(name="done")
        def done(ctx: durably.Context) -> str:
            return "ok"

        engine.start(waits, run_id="r1")
        engine.run(done, run_id="finished")
    return url


def _signals(tmp_path: Path) -> list[tuple[Any, ...]]:
    import sqlite3

    conn = sqlite3.connect(tmp_path / "j.db")
    try:
        return conn.execute(
            "SELECT run_id, seq, name, data FROM signals ORDER BY run_id, seq"
        ).fetchall()
    finally:
        conn.close()


def test_signal_sends_and_prints_the_sequence_number(tmp_path: Path) -> None:
    url = _journal(tmp_path)
    result = invoke("signal", "r1", "approve", "--data", '{"by": "ana"}', "--db", url)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "signal approve #1 sent to r1"
    result = invoke("signal", "r1", "approve", "--db", url, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"run_id": "r1", "name": "approve", "seq": 2}
    assert _signals(tmp_path) == [
        ("r1", 1, "approve", '{"by":"ana"}'),
        ("r1", 2, "approve", "null"),
    ]


def test_signal_refuses_bad_json_with_exit_2_and_sends_nothing(tmp_path: Path) -> None:
    url = _journal(tmp_path)
    result = invoke("signal", "r1", "approve", "--data", "{by: ana}", "--db", url)
    assert result.exit_code == 2
    assert "not JSON" in result.output and "--data" in result.output
    assert _signals(tmp_path) == []


def test_signal_to_unknown_or_finished_run_fails_with_what_to_do(tmp_path: Path) -> None:
    url = _journal(tmp_path)
    result = invoke("signal", "nope", "approve", "--db", url)
    assert result.exit_code == 1
    assert "no run 'nope'" in result.output and "durably runs list" in result.output
    result = invoke("signal", "finished", "approve", "--db", url, "--json")
    assert result.exit_code == 1
    error = json.loads(result.stdout)["error"]
    assert "already completed" in error and "nothing was sent" in error
    assert _signals(tmp_path) == []


def test_signal_command_in_a_real_process(tmp_path: Path) -> None:
    url = _journal(tmp_path)
    out = subprocess.run(
        [sys.executable, "-m", "durably.cli", "signal", "r1", "go", "--data", "[1, 2]"],
        capture_output=True,
        text=True,
        env={"DURABLY_URL": url, "PATH": "/usr/bin:/bin"},
        check=True,
    )
    assert out.stdout.strip() == "signal go #1 sent to r1"
    assert _signals(tmp_path) == [("r1", 1, "go", "[1,2]")]
    help_text = invoke("signal", "--help").output
    assert "--data" in help_text and "oldest first" in help_text


def test_runs_list_and_show_give_a_parked_runs_signal_reason(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    with durably.Engine(url, park_wait_s=0) as engine:

        @engine.workflow(name="waits")
        def waits(ctx: durably.Context) -> Any:
            return ctx.wait_for_signal("approve", timeout_s=60)

        with pytest.raises(durably.RunParked):
            engine.run(waits, run_id="r1")
    listed = CliRunner().invoke(
        main, ["runs", "list", "--status", "parked", "--db", url], env={"COLUMNS": "400"}
    )
    assert listed.exit_code == 0, listed.output
    text = " ".join(listed.output.split())
    assert "r1" in text and "signal 'approve' since" in text and "times out at" in text
    shown = CliRunner().invoke(main, ["runs", "show", "r1", "--db", url], env={"COLUMNS": "400"})
    assert shown.exit_code == 0, shown.output
    assert re.search(
        r"why: signal 'approve' since \S+Z \(times out at \S+Z\)", " ".join(shown.output.split())
    )
    assert "wait_for_signal:approve" in shown.output
    data = json.loads(invoke("runs", "list", "--status", "parked", "--db", url, "--json").output)
    (run,) = data["runs"] if isinstance(data, dict) else data
    assert run["status"] == "parked" and run["reason"].startswith("signal 'approve' since")
