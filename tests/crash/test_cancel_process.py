"""``durably cancel`` from another process: a real subprocess drives the run with
``engine.run`` (its step blocked on a file this test controls) and the test runs the real
``durably cancel`` command as a second subprocess. On both stores."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import durably

HERE = Path(__file__).parent


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}


def _start(url: str, run_id: str, folder: Path, mode: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(HERE / "cancel_agent.py"), url, run_id, str(folder), mode],
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for(path: Path, proc: subprocess.Popen[str] | None = None, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the agent exited early: {proc.communicate()}")
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.02)


def cancel_cmd(url: str, run_id: str, *extra: str) -> subprocess.CompletedProcess[str]:
    """The real ``durably cancel`` command, in its own process."""
    return subprocess.run(
        [sys.executable, "-m", "durably.cli", "cancel", run_id, "--db", url, *extra],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(),
    )


def _outcome(proc: subprocess.Popen[str], folder: Path) -> dict[str, Any]:
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    data: dict[str, Any] = json.loads((folder / "outcome.json").read_text())
    return data


@pytest.mark.parametrize("mode", ["plain", "catch"])
def test_cancel_from_another_process_while_running(
    journal_url: str, tmp_path: Path, mode: str
) -> None:
    folder = tmp_path / "agent"
    folder.mkdir()
    proc = _start(journal_url, "r", folder, mode)
    try:
        _wait_for(folder / "inside", proc)
        done = cancel_cmd(journal_url, "r", "--reason", "duplicate alert", "--json")
        assert done.returncode == 0, done.stderr
        said = json.loads(done.stdout)
        assert said["status"] == "running" and said["ended_at_once"] is False
        assert said["cancel_reason"] == "duplicate alert"
        (folder / "release").write_text("1")  # step a completes under its key
        outcome = _outcome(proc, folder)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert outcome["raised"] == "Cancelled" and outcome["reason"] == "duplicate alert"
    assert not (folder / "b-ran").exists()  # the next step never ran
    assert not (folder / "c-ran").exists()
    if mode == "catch":
        assert (folder / "caught").read_text() == "duplicate alert"
        assert (folder / "stopped-again").exists()
    with durably.Engine(journal_url) as e:
        run = e.get_run("r")
        assert run.status == "cancelled" and run.error_message == "duplicate alert"
        assert run.error_type == "durably.Cancelled" and run.outcome is None
        assert [(r.position, r.kind) for r in e.history("r")] == [("0", "step"), ("1", "halt")]


def test_cancel_a_queued_run_ends_it_at_once(journal_url: str) -> None:
    with durably.Engine(journal_url) as e:

        @e.workflow(name="agent")
        def agent(ctx: durably.Context) -> int:
            return 1

        handle = e.start(agent, run_id="q")
        done = cancel_cmd(journal_url, "q", "--reason", "not needed")
        assert done.returncode == 0, done.stderr
        assert "run q is cancelled: not needed" in done.stdout
        with pytest.raises(durably.Cancelled, match="not needed"):
            handle.result(timeout_s=5)


def test_cancel_errors_are_clear(journal_url: str) -> None:
    with durably.Engine(journal_url) as e:

        @e.workflow(name="agent")
        def agent(ctx: durably.Context) -> int:
            return 1

        e.run(agent, run_id="done")
    missing = cancel_cmd(journal_url, "nope", "--json")
    assert missing.returncode == 1 and "no run 'nope'" in json.loads(missing.stdout)["error"]
    finished = cancel_cmd(journal_url, "done")
    assert finished.returncode == 1
    assert "already finished (completed)" in finished.stderr
