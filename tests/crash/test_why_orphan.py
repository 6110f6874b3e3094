"""``durably runs why`` on a run whose process was really SIGKILLed: orphaned (the owner's
pid is gone), whether or not its lease has expired yet; then, once resumed, in doubt (the
killed process was inside an effect with neither key nor reconcile). And a queued run's
workers: a real ``durably worker`` counts while it lives, not once SIGKILLed."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import durably

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from why_agent import register  # noqa: E402


def _killed(url: str, run_id: str, lease_s: float, machine_id: str | None = None) -> int:
    """Run the agent until it SIGKILLs itself inside ``charge``; its pid. ``machine_id``
    makes it another host's process (its pid cannot be checked from here)."""
    env = dict(os.environ)
    if machine_id is not None:
        env["DURABLY_MACHINE_ID"] = machine_id
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "why_agent.py"), url, run_id, str(lease_s)], env=env
    )
    assert proc.wait(timeout=120) == -signal.SIGKILL
    return proc.pid


def _why(url: str, run_id: str) -> dict[str, Any]:
    res = subprocess.run(
        [sys.executable, "-m", "durably.cli", "runs", "why", run_id, "--json", "--db", url],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert res.returncode == 0, res.stderr
    data: dict[str, Any] = json.loads(res.stdout)
    return data


def test_orphaned_after_sigkill_then_in_doubt(journal_url: str) -> None:
    pid = _killed(journal_url, "pay-1", lease_s=300)
    got = _why(journal_url, "pay-1")
    host = os.environ.get("DURABLY_HOST") or os.uname().nodename
    assert got["state"] == "orphaned" and got["owner_pid"] == pid and got["owner_gone"]
    assert re.fullmatch(
        rf"orphaned: owner pid {pid} on {re.escape(host)} is gone, lease until"
        r" (\S+ )?\d\d:\d\d:\d\d UTC \(not waited for: the owner is gone\); the next claim"
        r" takes it"
        r" over \(or `durably recover` on that host\); it was at step 1 charge",
        got["sentence"],
    )
    # The next claim takes it over and finds the effect in doubt: a person decides.
    engine = durably.Engine(journal_url)
    with pytest.raises(durably.RunInDoubt):
        engine.run(register(engine), 5, run_id="pay-1")
    engine.close()
    got = _why(journal_url, "pay-1")
    assert got["state"] == "in_doubt"
    assert got["sentence"].startswith("in doubt: step 1 'charge' was in flight when its process")


@pytest.mark.parametrize(
    ("machine_id", "verdict"), [(None, "is gone"), ("another-machine", "shows no life")]
)
def test_orphaned_with_an_expired_lease(
    journal_url: str, machine_id: str | None, verdict: str
) -> None:
    # A lease of its own length, not 1 s: the explanation is asked for two seconds after
    # the lease ended (durably.explain's now=) rather than after sleeping until then, and a
    # 1 s lease could lapse on a loaded machine before the agent reached its kill point
    # (it stopped with StaleLease instead). The CLI's JSON of the explanation: see above.
    pid = _killed(journal_url, "pay-2", lease_s=30, machine_id=machine_id)
    with durably.Engine(journal_url) as engine:
        expired_at = engine.get_run("pay-2").lease_expires_at
        assert expired_at is not None
        got = durably.explain(engine, "pay-2", now=max(time.time(), expired_at + 2)).to_json()
    assert got["state"] == "orphaned" and got["owner_pid"] == pid
    assert got["owner_gone"] is (machine_id is None)
    assert re.match(
        rf"orphaned: owner pid {pid} on \S+ {verdict}, lease expired \d+ s ago; the next claim"
        " takes it over",
        got["sentence"],
    )


def test_a_killed_worker_no_longer_serves(journal_url: str) -> None:
    engine = durably.Engine(journal_url)

    @engine.workflow(name="other")  # not served by the worker: the run stays queued
    def other(ctx: durably.Context) -> int:
        return 1

    engine.start(other, run_id="waiting", queue="q")
    env = {**os.environ, "DURABLY_URL": journal_url}
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
    worker = subprocess.Popen(
        [sys.executable, "-m", "durably.cli", "worker", "why_worker_app:engine", "--queue", "q"],
        env=env,
        cwd=HERE,
    )
    try:
        for _ in range(1200):  # until the worker wrote its row (no timed assertion)
            if engine.store.live_workers():
                break
            time.sleep(0.05)
        got = _why(journal_url, "waiting")
        assert got["workers"] == 1
        assert got["sentence"].endswith("0 runs ahead, 1 worker serving it")
    finally:
        worker.kill()
        worker.wait(60)
    # Its row outlives it until its lease-long beat expires, but its pid is gone.
    assert engine.store.live_workers()
    got = _why(journal_url, "waiting")
    assert got["workers"] == 0 and "no live worker serves it" in got["sentence"]
    engine.close()
