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


def _wait_status(url: str, run_id: str, status: str, timeout_s: float = 60) -> durably.RunRecord:
    deadline = time.monotonic() + timeout_s
    with durably.Engine(url) as e:
        while True:
            run = e.get_run(run_id)
            if run.status == status:
                return run
            assert time.monotonic() < deadline, f"run {run_id} stayed {run.status}"
            time.sleep(0.05)


def test_cancel_while_parked_in_an_engine_run_waiting_in_process(
    journal_url: str, tmp_path: Path
) -> None:
    """The run sleeps an hour inside another process's engine.run (waiting in-process, no
    lease held); a cancel from a third process wakes it at once: it replays, unwinds at
    the timer and ends cancelled within seconds."""
    folder = tmp_path / "agent"
    folder.mkdir()
    proc = _start(journal_url, "p", folder, "sleep")
    try:
        _wait_for(folder / "sleeping", proc)
        parked = _wait_status(journal_url, "p", "parked")
        assert parked.wake_at is not None and parked.wake_at > time.time() + 3000
        asked = time.monotonic()
        done = cancel_cmd(journal_url, "p", "--reason", "stop waiting")
        assert done.returncode == 0, done.stderr
        assert "will be cancelled: stop waiting" in done.stdout
        outcome = _outcome(proc, folder)
        took = time.monotonic() - asked
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert took < 20, took  # woken, not left to its hour (SQLite looks every second)
    assert outcome["raised"] == "Cancelled" and outcome["reason"] == "stop waiting"
    assert not (folder / "b-ran").exists()
    with durably.Engine(journal_url) as e:
        run = e.get_run("p")
        assert run.status == "cancelled" and run.error_message == "stop waiting"
        assert [(r.position, r.kind) for r in e.history("p")] == [("0", "step"), ("1", "halt")]


def test_cancel_a_parked_run_with_no_process_then_a_worker_unwinds_it(
    journal_url: str, tmp_path: Path
) -> None:
    from durably.worker import Worker

    ran: list[str] = []
    with durably.Engine(journal_url, park_wait_s=0) as e:

        @e.workflow(name="agent")
        def agent(ctx: durably.Context) -> str:
            ctx.step("a", lambda: ran.append("a") or "a")
            ctx.sleep(3600)
            return str(ctx.step("b", lambda: ran.append("b") or "b"))

        with pytest.raises(durably.RunParked):
            e.run(agent, run_id="p")  # parks; nothing waits for it
        assert e.get_run("p").status == "parked"
        done = cancel_cmd(journal_url, "p", "--reason", "abandon", "--json")
        assert done.returncode == 0, done.stderr
        said = json.loads(done.stdout)
        assert said["status"] == "parked" and said["ended_at_once"] is False
        assert said["wake_at"] <= time.time()  # due now, so a worker takes it
        stats = Worker(e, concurrency=1, poll_interval_s=0.05).run(max_runs=1)
        assert stats.cancelled == 1
        run = e.get_run("p")
        assert run.status == "cancelled" and run.error_message == "abandon"
    assert ran == ["a"]
