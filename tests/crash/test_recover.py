"""``durably recover``: a process SIGKILLed mid-run leaves its run ``running`` under a
dead owner; ``durably recover MODULE:ENGINE`` in another process finds it (same host,
pid gone) and completes it, each effect landing once (issue 8 §3)."""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import durably

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from recover_flows import register  # noqa: E402
from scripts import killed  # noqa: E402


def _env(journal_url: str, world: Path, kill: str | None = None, **extra: str) -> dict[str, str]:
    env = {**os.environ, "DURABLY_URL": journal_url, "RECOVER_WORLD": str(world), **extra}
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
    env.pop("RECOVER_KILL", None)
    if kill:
        env["RECOVER_KILL"] = kill
    return env


def _durably(journal_url: str, world: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "durably.cli", *args],
        env=_env(journal_url, world),
        cwd=HERE,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _killed_mid_effect(run_id: str, env: dict[str, str]) -> None:
    """Run ``pay`` in a process that SIGKILLs itself after the second charge reached the
    world, before it was recorded."""
    killed(HERE / "recover_app.py", env, run_id)


def test_recover_completes_a_run_whose_process_was_sigkilled(
    journal_url: str, tmp_path: Path
) -> None:
    world = tmp_path / "world.db"
    _killed_mid_effect("pay-1", _env(journal_url, world, kill="1:effect"))
    listed = _durably(journal_url, world, "runs", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    (row,) = json.loads(listed.stdout)
    assert row["status"] == "running" and row["orphaned"] is True
    assert row["owner_pid"] is not None and row["owner_pid"] != os.getpid()

    recovered = _durably(journal_url, world, "recover", "recover_app:engine", "--json")
    assert recovered.returncode == 0, recovered.stderr
    assert json.loads(recovered.stdout) == {
        "pay-1": {"status": "completed", "result": ["charged 5", "charged 1"]}
    }
    with sqlite3.connect(world) as w:
        requests = [r[0] for r in w.execute("SELECT requests FROM effects ORDER BY key")]
    # Two effects, one row each (effects once); the one killed in flight was retried
    # under the same key, which the receiver deduplicated.
    assert sorted(requests) == [1, 2]
    again = _durably(journal_url, world, "recover", "recover_app:engine")
    assert again.returncode == 0 and "no run" in again.stdout


def test_a_twin_machines_dead_process_is_waited_for_never_taken_at_once(
    journal_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The killed process posed as another machine with this one's node name and pid
    # namespace (only its machine id differs): its pid means nothing here, so nothing
    # may take its run before the lease expires, however dead the pid looks locally.
    world = tmp_path / "world.db"
    # A lease long enough that a loaded machine still gets to the first claim inside it
    # (6 s ran out under a load average of 19: the `durably recover` child alone took
    # that long to start); the second engine then waits out what is left of it.
    env = _env(journal_url, world, kill="1:effect", DURABLY_MACHINE_ID="twin", RECOVER_LEASE_S="15")
    _killed_mid_effect("pay-2", env)
    nothing = _durably(journal_url, world, "recover", "recover_app:engine", "--json")
    assert nothing.returncode == 0, nothing.stderr
    assert json.loads(nothing.stdout) == {}
    os.environ["RECOVER_WORLD"] = str(world)  # recover_app's effects, in this process
    try:
        with durably.Engine(journal_url, wait_for_lease=False) as eng:
            register(eng)
            with pytest.raises(durably.RunLeased):
                eng.run("pay", 5, run_id="pay-2")
        with durably.Engine(journal_url) as eng:
            register(eng)
            with caplog.at_level(logging.WARNING, logger="durably"):
                assert eng.run("pay", 5, run_id="pay-2") == ["charged 5", "charged 1"]
    finally:
        del os.environ["RECOVER_WORLD"]
    assert "waiting for its lease to expire" in caplog.text
    with sqlite3.connect(world) as w:
        requests = [r[0] for r in w.execute("SELECT requests FROM effects ORDER BY key")]
    assert sorted(requests) == [1, 2]
