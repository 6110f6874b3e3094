"""Golden journals: checked-in runs replay against today's code with zero writes.

Each ``journals/*.json`` is a real run of a workflow in ``workflows.py`` (written by
``make_golden.py``), one per capability: steps, gather, timers, signals, approvals,
sagas, budgets, patched, blobs/inputs, halts, both legacy key formats, a budget stop,
and values (every type the codec writes with a ``$`` tag, as input, arguments and
output). The test loads one into a fresh journal (SQLite and PostgreSQL), built at the
schema version it was written at and migrated by opening it, and replays it with
``durably replay --check``'s machinery (``durably.replaycheck``): a real replay from the
top through the recorded history, not the finished-run shortcut, which must

- report no NonDeterminism (no finding),
- reach the workflow body's end with the value (or the halt) the run recorded,
- write nothing: every row of every table is the same before and after (and on SQLite
  no connection committed at all: ``PRAGMA data_version`` is unchanged),
- and give every recorded effect the key it was sent with (``RunRecord.key``).

A change that stops durably reading the journals it wrote before fails here. Regenerate
the files only when the format is meant to change, and say why.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import durably
from durably.journal import codec
from durably.replaycheck import check_run
from tests.golden import journal
from tests.golden.workflows import REACHED, register

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
GOLDENS = sorted((HERE / "journals").glob("*.json"))
CAPABILITIES = {
    "steps",
    "gather",
    "timers",
    "signals",
    "approvals",
    "sagas",
    "budgets",
    "patched",
    "blobs",
    "halts",
    "legacy_keys",
    "legacy_gather_keys",
    "values",
    "budget_stop",
}
LEGACY = {"legacy_keys", "legacy_gather_keys"}


def _golden(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def test_there_is_a_golden_journal_per_capability() -> None:
    assert {p.stem for p in GOLDENS} == CAPABILITIES


def test_the_goldens_hold_what_they_pin() -> None:
    """Each file really shows its capability (a regenerated file that lost it fails)."""
    g = {p.stem: _golden(p) for p in GOLDENS}
    kinds = {name: {(s["kind"], s["status"]) for s in d["steps"]} for name, d in g.items()}
    assert {("step", "ok"), ("step", "failed"), ("now", "ok"), ("uuid", "ok")} <= kinds["steps"]
    assert ("gather", "ok") in kinds["gather"]
    assert [s["kind"] for s in g["timers"]["steps"]][:2] == ["sleep", "sleep"]
    assert g["signals"]["signals"] and g["signals"]["signals"][0]["consumed_by"] is not None
    assert g["approvals"]["approvals"][0]["outcome"] == "approved"
    assert ("compensate", "ok") in kinds["sagas"]
    assert any(s["name"].startswith("undo:") for s in g["sagas"]["steps"])
    assert len(g["budgets"]["spend"]) == 2 and g["budgets"]["budgets"]
    assert ("patched", "ok") in kinds["patched"]
    assert ("halt", "ok") in kinds["halts"] and g["halts"]["runs"][0]["status"] == "cancelled"
    assert [s["name"] for s in g["budget_stop"]["steps"] if s["kind"] == "halt"] == [
        "durably.budget"
    ]
    blobs = g["blobs"]
    assert any(len(b["data"]) > durably.limits.OUTPUT_INLINE_BYTES_MAX for b in blobs["blobs"])
    assert any(len(b["data"]) > durably.limits.INLINE_CHARS_MAX for b in blobs["blobs"])
    for name in LEGACY:
        assert g[name]["runs"][0]["incarnation"] is None
    assert ("gather", "ok") not in kinds["legacy_gather_keys"]  # from before gather markers
    # Every type the codec tags, in the run's input, a step's inputs and its output: a
    # renamed tag (or a changed form) stops old journals reading and fails here.
    values = json.dumps(g["values"])
    untagged = [tag for tag in codec._TAG_DECODERS if f'{{\\"{tag}\\":' not in values]
    assert untagged == [], f"the values golden holds no {untagged}: regenerate it"
    for name, d in g.items():
        assert d["golden"] == name and len(d["runs"]) == 1, name
        assert d["runs"][0]["status"] in ("completed", "cancelled", "failed"), name


def _data_version(url: str) -> sqlite3.Connection | None:
    if not url.startswith("sqlite"):
        return None
    return sqlite3.connect(journal._sqlite_path(url))


def _expected(name: str, run: durably.RunRecord) -> Any:
    if run.status == "cancelled":
        return f"cancelled: {run.cancel_reason}"
    if run.status == "failed":  # stopped by its budget: the error it failed with
        return f"{(run.error_type or '').rpartition('.')[2]}: {run.error_message}"
    assert run.outcome is not None
    return json.loads(run.outcome)


# The journal is created at the golden's own schema version, then migrated: an empty schema.
@pytest.mark.pg_empty_schema
@pytest.mark.parametrize("path", GOLDENS, ids=[p.stem for p in GOLDENS])
def test_golden_journal_replays_with_zero_writes(path: Path, journal_url: str) -> None:
    golden = _golden(path)
    name = golden["golden"]
    journal.load(journal_url, golden)
    engine = durably.Engine(journal_url, clock=durably.FakeClock(2_000_000_000.0))
    watcher = _data_version(journal_url)
    try:
        register(engine)
        run = engine.get_run(name)
        assert run.status == golden["runs"][0]["status"]
        before = journal.snapshot(journal_url)
        version = watcher.execute("PRAGMA data_version").fetchone() if watcher else None
        REACHED.clear()
        finding = check_run(engine, run)
        assert finding is None, f"{name}: {finding.kind} at {finding.position}: {finding.reason}"
        assert len(REACHED) == 1, f"{name}: the replay did not reach the workflow's end"
        reached_name, value = REACHED[0]
        assert reached_name == name
        # What the body computed on replay, encoded as the run's outcome was.
        got = value if run.status != "completed" else json.loads(codec.dumps(value))
        assert got == _expected(name, run)
        assert journal.snapshot(journal_url) == before, f"{name}: the replay wrote rows"
        if watcher is not None:
            assert watcher.execute("PRAGMA data_version").fetchone() == version
        _check_keys(engine, run, golden)
    finally:
        REACHED.clear()
        if watcher is not None:
            watcher.close()
        engine.close()


def _check_keys(engine: durably.Engine, run: durably.RunRecord, golden: dict[str, Any]) -> None:
    """Every effect recorded the key it was called with; today's key of that position
    (``RunRecord.key``) is the same, in the format the run's row calls for."""
    seen = 0
    for rec in engine.history(run.run_id):
        if rec.status != "ok" or rec.output is None or not rec.output.startswith("{"):
            continue
        out = json.loads(rec.output)
        if "key" not in out:
            continue
        seen += 1
        assert run.key(rec.position) == out["key"], rec.position
        if run.incarnation is None:
            assert out["key"] == f"{run.run_id}:{rec.position}"
        else:
            assert out["key"] == f"{run.run_id}:{run.incarnation}:{rec.position}"
    expects_keys = {"steps", "gather", "approvals", "sagas", *LEGACY}
    assert (seen > 0) == (golden["golden"] in expects_keys), golden["golden"]


def test_replay_check_cli_passes_every_golden(tmp_path: Path) -> None:
    """``durably replay --check`` (the command users run before a deploy) over one journal
    holding every golden run: all checked, none diverging, nothing written."""
    url = f"sqlite:///{tmp_path / 'all.db'}"
    goldens = [_golden(p) for p in GOLDENS]
    journal.create_journal(url, max(g["schema_version"] for g in goldens))
    for g in goldens:
        journal.insert(url, g)
    durably.Engine(url).close()  # migrate to today's schema first, like any old journal
    before = journal.snapshot(url)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "durably.cli",
            "replay",
            "--check",
            "tests.golden.app:engine",
            "--finished",  # the golden runs are finished: check them all
            "--db",
            url,
            "--json",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is True and report["checked"] == len(goldens), report
    assert report["diverging"] == [] and report["unserved"] == []
    assert journal.snapshot(url) == before


def test_a_changed_workflow_is_caught_by_its_golden(tmp_path: Path) -> None:
    """The goldens can fail: the steps run replayed against code that calls a step by
    another name is reported as diverging, at its position."""
    golden = _golden(HERE / "journals" / "steps.json")
    url = f"sqlite:///{tmp_path / 'changed.db'}"
    journal.load(url, golden)
    engine = durably.Engine(url)
    try:

        @engine.workflow(name="golden.steps")
        def steps(ctx: durably.Context, topic: str) -> str:
            ctx.step("plan_renamed", lambda t: t, topic)
            return "x"

        finding = check_run(engine, engine.get_run("steps"))
        assert finding is not None and finding.kind == "diverges" and finding.position == "0"
        assert "plan_renamed" in finding.reason
    finally:
        engine.close()
