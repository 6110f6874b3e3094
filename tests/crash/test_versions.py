"""Versions side by side across a real SIGKILL (issue 13): a v1 run left half-done by a
killed process finishes on v1 code in an engine that registers v1 and v2, while new runs
start on v2; a worker serving only v2 never claims the v1 run."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

import durably

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from scripts import killed  # noqa: E402
from versions_app import register  # noqa: E402


def _killed_v1_run(journal_url: str, world: Path, run_id: str) -> None:
    env = {
        **os.environ,
        "DURABLY_URL": journal_url,
        "VERSIONS": "1",
        "VERSIONS_WORLD": str(world),
        "VERSIONS_KILL": "1",
    }
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
    killed(HERE / "versions_app.py", env, run_id)


def test_a_killed_v1_run_finishes_on_v1_while_new_runs_take_v2(
    journal_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = tmp_path / "world.txt"
    monkeypatch.setenv("VERSIONS_WORLD", str(world))  # read by the tools in this process
    _killed_v1_run(journal_url, world, "old")
    assert world.read_text().splitlines() == ["v1:pack:parcel"]

    # A worker of the new deploy serves only v2: the v1 run, whose owner is provably
    # dead, is runnable, yet it never claims it; it does claim a new run (v2).
    v2_only = durably.Engine(journal_url, lease_s=30)
    try:
        (ship_v2,) = register(v2_only, ["2"]).values()
        assert v2_only.claim_next(["default"]) is None
        # Nor does its recovery at startup take the v1 orphan of this host (it tried it and
        # returned a WorkflowNotRegistered for it): it is left to a v1 process.
        assert v2_only.recover() == {}
        v2_only.start(ship_v2, "crate", run_id="new-by-worker")
        claimed = v2_only.claim_next(["default"])
        assert claimed is not None and claimed.run_id == "new-by-worker"
        assert claimed.version == "2"
        assert v2_only.execute_claimed(claimed) == [
            "v2:check:crate",
            "v2:pack:crate",
            "v2:send:crate",
        ]
        assert v2_only.claim_next(["default"]) is None
        assert v2_only.get_run("old").status == "running"
    finally:
        v2_only.close()

    both = durably.Engine(journal_url, lease_s=30)
    try:
        flows = register(both, ["1", "2"])
        # A process registering v1 recovers it: v1 code, its recorded step replayed.
        assert both.recover() == {"old": ["v1:pack:parcel", "v1:send:parcel"]}
        # engine.run with the newest workflow object gives the old run's v1 outcome.
        assert both.run(flows["2"], "parcel", run_id="old") == [
            "v1:pack:parcel",
            "v1:send:parcel",
        ]
        assert both.run(flows["1"], "box", run_id="fresh") == [
            "v2:check:box",
            "v2:pack:box",
            "v2:send:box",
        ]
        assert both.get_run("fresh").version == "2"
    finally:
        both.close()
    assert world.read_text().splitlines() == [
        "v1:pack:parcel",
        "v2:check:crate",
        "v2:pack:crate",
        "v2:send:crate",
        "v1:send:parcel",
        "v2:check:box",
        "v2:pack:box",
        "v2:send:box",
    ]
