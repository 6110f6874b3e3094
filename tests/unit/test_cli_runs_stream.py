"""``durably runs list --since`` with its count line, and ``durably runs tail``."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import durably
from durably.cli import main
from durably.cli.runs import since_time
from durably.clock import FakeClock

HOSTILE = "[/link] [bold]x\x1b]8;;http://evil\x1b\\click\x1b]8;;\x1b\\ \x1b[2J\r\x9b1m\u202eevil"
DAY_S = 86_400.0


def invoke(*args: str) -> Any:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture
def url(tmp_path: Path) -> str:
    """A journal with runs made 40 days, 2 hours and 1 minute before the real now."""
    import time

    url = f"sqlite:///{tmp_path / 'j.db'}"
    clock = FakeClock(time.time() - 40 * DAY_S)
    with durably.Engine(url, clock=clock) as engine:

        @engine.workflow(name="ok")
        def ok(ctx: durably.Context) -> int:
            ctx.emit("note", HOSTILE)
            return ctx.step("s", lambda: 1)

        @engine.workflow(name="bad")
        def bad(ctx: durably.Context) -> None:
            ctx.step("boom", _hostile)

        engine.run(ok, run_id="old")
        clock.advance(40 * DAY_S - 2 * 3600)
        engine.run(ok, run_id="recent")
        with pytest.raises(durably.WorkflowFailed):
            engine.run(bad, run_id="failed")
        clock.advance(2 * 3600 - 60)
        engine.start(ok, run_id="queued")
    return url


def _hostile() -> None:
    raise RuntimeError(HOSTILE)


def test_list_since_filters_and_counts_by_status(url: str) -> None:
    out = invoke("runs", "list", "--db", url).stdout
    assert "4 runs: 2 completed, 1 failed, 1 queued" in out
    out = invoke("runs", "list", "--db", url, "--since", "30d").stdout
    assert "3 runs: 1 completed, 1 failed, 1 queued" in out and "old" not in out
    out = invoke("runs", "list", "--db", url, "--since", "15m").stdout
    assert "1 run: 1 queued" in out
    out = invoke("runs", "list", "--db", url, "--since", "30d", "--limit", "1").stdout
    assert "3 runs: 1 completed, 1 failed, 1 queued (showing 1)" in out
    out = invoke("runs", "list", "--db", url, "--workflow", "bad").stdout
    assert "1 run: 1 failed" in out
    listed = json.loads(invoke("runs", "list", "--db", url, "--since", "12h", "--json").stdout)
    assert sorted(r["run_id"] for r in listed) == ["failed", "queued", "recent"]


def test_since_reads_spans_and_iso_times_and_refuses_the_rest() -> None:
    assert since_time("30d", 100 * DAY_S) == 70 * DAY_S
    assert since_time("12h", 50_000.0) == 50_000.0 - 12 * 3600
    assert since_time("15m", 1000.0) == 100.0
    assert since_time("90s", 1000.0) == 910.0
    assert since_time("1970-01-02", 0) == DAY_S  # UTC unless an offset is given
    assert since_time("1970-01-02T02:00+02:00", 0) == DAY_S
    bad = invoke("runs", "list", "--db", "sqlite:///x.db", "--since", "last week")
    assert bad.exit_code == 1 and "or an age (90m, 24h, 7d)" in bad.output
    bad = invoke("runs", "list", "--since", "-3d", "--json")
    assert bad.exit_code == 1 and "an ISO time" in json.loads(bad.stdout)["error"]


def test_tail_prints_one_escaped_line_per_event(url: str) -> None:
    out = invoke("runs", "tail", "failed", "--db", url).stdout
    lines = out.splitlines()
    with durably.Engine(url) as engine:
        events = engine.events("failed").events
    assert len(lines) == len(events)
    for line, event in zip(lines, events, strict=True):
        assert line.split()[0] == str(event.cursor) and event.kind in line
    assert "\x1b" not in out and "\u202e" not in out and "\r" not in out
    assert "[/link]" in out and "\\x1b" in out  # shown as text, never markup or escapes
    note = invoke("runs", "tail", "old", "--db", url).stdout
    assert "user:note" in note and "\\x1b" in note


def test_tail_json_and_after(url: str) -> None:
    out = invoke("runs", "tail", "old", "--db", url, "--json").stdout
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["cursor"] for r in rows] == list(range(1, len(rows) + 1))
    assert rows[-1]["kind"] == "run.completed" and rows[0]["run_id"] == "old"
    user = next(r for r in rows if r["kind"] == "user")
    assert user["data"] == {"kind": "note", "data": HOSTILE} and user["position"] == "0"
    later = invoke("runs", "tail", "old", "--db", url, "--json", "--after", "3").stdout
    assert [json.loads(line) for line in later.splitlines()] == rows[3:]
    missing = invoke("runs", "tail", "nope", "--db", url, "--json")
    assert missing.exit_code == 1 and "no run 'nope'" in json.loads(missing.stdout)["error"]


def test_tail_follow_ends_when_the_run_finishes(url: str) -> None:
    """A real `durably runs tail --follow` process, following a run another thread
    drives to the end."""
    gate = threading.Event()
    db = ["--json", "--db", url]
    with durably.Engine(url) as engine:

        @engine.workflow(name="ok")
        def ok(ctx: durably.Context) -> int:
            ctx.step("wait", lambda: gate.wait(60))
            return 1

        with subprocess.Popen(
            [sys.executable, "-m", "durably.cli", "runs", "tail", "queued", "-f", *db],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        ) as tail:
            try:
                worker = threading.Thread(target=engine.resume, args=("queued",))
                worker.start()
                gate.set()
                out, err = tail.communicate(timeout=100)
                worker.join(60)
            finally:
                tail.kill()  # never left running when the test fails
        assert tail.returncode == 0, err
        kinds = [json.loads(line)["kind"] for line in out.splitlines()]
        assert kinds == [e.kind for e in engine.events("queued").events]
        assert kinds[-1] == "run.completed"
