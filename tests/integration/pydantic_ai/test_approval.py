"""A ``requires_approval=True`` tool under ``DurableAgent``: the run parks as a durably
approval bound to the tool's step name and arguments (whatever the agent's
``output_type``: here plain ``str``, no ``DeferredToolRequests``), ``durably approve``
from another process wakes it, and the tool runs once. (A rejection, which sends the
model the denial: test_agent.py, in one process.)"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from ..crash_harness import ROOT, app_command, model_turns, rows
from .test_crash import APP

WAIT_S_MAX = 30.0


def cli(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "durably.cli", *args, "--db", f"sqlite:///{tmp / 'journal.db'}"],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_an_approval_tool_parks_and_runs_once_after_durably_approve(tmp_path: Path) -> None:
    agent = subprocess.Popen(
        app_command(APP, tmp_path, "refund-1", "approval"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        deadline = time.monotonic() + WAIT_S_MAX
        pending: list[dict[str, object]] = []
        while not pending and time.monotonic() < deadline:
            assert agent.poll() is None, agent.communicate()
            if (tmp_path / "journal.db").exists():
                listed = cli(tmp_path, "approvals", "list", "--json")
                pending = json.loads(listed.stdout) if listed.returncode == 0 else []
            time.sleep(0.05)
        [request] = pending
        assert request["action"] == "pydantic_ai.shop.tool.refund"
        assert request["args"] == {"amount": 30}
        assert rows(tmp_path, "SELECT * FROM attempts") == []  # parked before the tool
        decided = cli(
            tmp_path,
            "approve",
            "refund-1",
            str(request["request_id"]),
            "--digest",
            str(request["digest"])[:8],
            "--by",
            "ana",
        )
        assert decided.returncode == 0, decided.stderr
        out, err = agent.communicate(timeout=60)
    finally:
        agent.kill()
    assert agent.returncode == 0, err
    answer = json.loads(out)
    assert rows(tmp_path, "SELECT tool, item FROM attempts") == [("refund", "30")]
    assert answer == "done: refund 30 ok"
    # The parked run was replayed on wake: the model's first turn was not asked again.
    assert model_turns(tmp_path) == [1, 2]
