"""``durably runs tail`` as a person reads it: times in one form (the reasons' ISO UTC, never
epoch seconds beside them), and ``--follow`` started before the agent waits for its
journal and its run instead of exiting."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import durably
from durably.cli import main as cli


def test_times_in_event_data_are_iso_like_the_reasons(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    clock = durably.FakeClock()  # 2023-11-14T22:13:20Z
    with durably.Engine(url, clock=clock, park_wait_s=0) as engine:

        @engine.workflow(name="w")
        def w(ctx: durably.Context) -> None:
            ctx.sleep(3600)

        with pytest.raises(durably.RunParked):
            engine.run(w, run_id="r")
    text = CliRunner().invoke(cli, ["runs", "tail", "r", "--db", url]).output
    [parked] = [line for line in text.splitlines() if "run.parked" in line]
    assert "reason=timer until 2023-11-14T23:13:20Z wake_at=2023-11-14T23:13:20Z" in parked
    as_json = CliRunner().invoke(cli, ["runs", "tail", "r", "--json", "--db", url]).output
    [event] = [json.loads(line) for line in as_json.splitlines() if "run.parked" in line]
    assert event["data"]["wake_at"] == clock.time() + 3600  # scripts keep the number


def test_follow_waits_for_a_journal_and_run_not_created_yet(tmp_path: Path) -> None:
    db = tmp_path / "later.db"
    url = f"sqlite:///{db}"
    tail = subprocess.Popen(
        [sys.executable, "-m", "durably.cli", "runs", "tail", "r", "--follow", "--db", url],
        env={**os.environ, "COLUMNS": "200"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert tail.stderr is not None
        said = tail.stderr.readline()  # the tail is up, waiting: it never creates the journal
        assert "waiting for the journal" in said and not db.exists()
        with durably.Engine(url) as engine:
            engine.start(engine.workflow(name="w")(lambda ctx: None), run_id="other")
            said = tail.stderr.readline()  # the journal exists, the run not yet
            assert "waiting for run 'r' to be created" in said
            engine.run(engine.workflow(name="w2")(lambda ctx: "done"), run_id="r")
        out, err = tail.communicate(timeout=60)
    finally:
        tail.kill()
    assert tail.returncode == 0, err
    assert "run.completed" in out
