"""``durably replay --check MODULE:ENGINE`` as a real subprocess (issue 13): it names the
runs a deploy would break, exits 1, writes nothing; exits 0 once the code is patched.
Finished runs are checked here with ``--finished`` (by default they are left out:
tests/unit/test_mismatch_reasons_printed.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import durably

APP = """
import os
import durably

engine = durably.Engine()
PATCH = os.environ.get("APP_PATCH") == "1"
INSERT = os.environ.get("APP_INSERT") == "1"


def tool(x: int) -> int:
    raise SystemExit("replay --check called a tool")


def fine(x: int) -> int:
    return x + 1


@engine.workflow(name="flow")
def flow(ctx: durably.Context, x: int) -> int:
    y = ctx.step("a", fine if not INSERT else tool, x)
    if INSERT and (not PATCH or ctx.patched("insert")):
        ctx.step("inserted", tool, y)
    return ctx.step("c", fine if not INSERT else tool, y)
"""


def _cli(tmp_path: Path, url: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "durably.cli", *args],
        env={**os.environ, "DURABLY_URL": url, "PYTHONPATH": str(tmp_path), **env},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_replay_check_names_diverging_runs_and_exits_1(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text(APP)
    db = tmp_path / "j.db"
    url = f"sqlite:///{db}"
    with durably.Engine(url) as e:

        @e.workflow(name="flow")
        def flow(ctx: durably.Context, x: int) -> int:
            return ctx.step("c", lambda v: v + 1, ctx.step("a", lambda v: v + 1, x))

        for i in range(3):
            e.run(flow, i, run_id=f"r{i}")
        e.start(flow, 9, run_id="queued")  # no history yet: nothing to check
        e.fault_hook = _stop_before("1")
        with pytest.raises(Crash):
            e.run(flow, 5, run_id="half")  # running, step a recorded: its next step is live

    same = _cli(tmp_path, url, "replay", "--check", "app:engine", "--finished")
    assert same.returncode == 0, same.stderr
    assert "ok: 4 run(s) checked, 0 would diverge" in same.stdout

    broken = _cli(
        tmp_path, url, "replay", "--check", "app:engine", "--finished", "--json", APP_INSERT="1"
    )
    assert broken.returncode == 1, broken.stderr
    report = json.loads(broken.stdout)
    assert report["ok"] is False and report["checked"] == 4
    assert sorted((d["run_id"], d["position"]) for d in report["diverging"]) == [
        ("r0", "1"),
        ("r1", "1"),
        ("r2", "1"),
    ]
    assert "inserted" in report["diverging"][0]["reason"]
    # It says what a resume would do: the check itself blocked nothing.
    assert all("resume would block the run" in d["reason"] for d in report["diverging"])
    assert not any("run is blocked" in d["reason"] for d in report["diverging"])

    text = _cli(tmp_path, url, "replay", "--check", "app:engine", "--finished",
                "--workflow", "flow", APP_INSERT="1")  # fmt: skip
    assert text.returncode == 1 and "DIVERGES r0 (flow" in text.stdout
    assert "FAIL: 4 run(s) checked, 3 would diverge" in text.stdout

    # The half-done run reaches the new marker with nothing recorded: True there, and its
    # check ends (the inserted step, a tool that exits the process, is never called).
    patched = _cli(
        tmp_path,
        url,
        "replay",
        "--check",
        "app:engine",
        "--finished",
        APP_INSERT="1",
        APP_PATCH="1",
    )
    assert patched.returncode == 0, patched.stdout + patched.stderr
    assert "ok: 4 run(s) checked" in patched.stdout
    with durably.Engine(url) as e:
        assert [r.status for r in e.store.list_runs()].count("completed") == 3
    assert _no_new_records(url)  # the check wrote nothing


def _no_new_records(url: str) -> bool:
    with durably.Engine(url) as e:
        return all(len(e.history(f"r{i}")) == 2 for i in range(3)) and len(e.history("half")) == 1


class Crash(BaseException):
    """Stops a run in this process like a death (real deaths: tests/crash)."""


def _stop_before(position: str) -> Any:
    def hook(run_id: str, pos: str, name: str, window: str) -> None:
        if (pos, window) == (position, "before"):
            raise Crash(pos)

    return hook


def test_replay_check_filters_and_bad_input(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text(APP)
    url = f"sqlite:///{tmp_path / 'j.db'}"
    with durably.Engine(url) as e:

        @e.workflow(name="flow")
        def flow(ctx: durably.Context, x: int) -> int:
            return ctx.step("c", lambda v: v + 1, ctx.step("a", lambda v: v + 1, x))

        e.run(flow, 1, run_id="r")
    later = _cli(tmp_path, url, "replay", "--check", "app:engine", "--since", "2999-01-01",
                 APP_INSERT="1")  # fmt: skip
    assert later.returncode == 0 and "0 run(s) checked" in later.stdout
    recent = _cli(tmp_path, url, "replay", "--check", "app:engine", "--since", "1h",
                  "--status", "completed", APP_INSERT="1")  # fmt: skip
    assert recent.returncode == 1 and "1 would diverge" in recent.stdout
    bad = _cli(tmp_path, url, "replay", "--check", "app:engine", "--since", "yesterday")
    assert bad.returncode == 1 and "ISO time" in bad.stderr
    no_mode = _cli(tmp_path, url, "replay", "app:engine")
    assert no_mode.returncode == 2 and "--check" in no_mode.stderr


@pytest.mark.parametrize("command", [["replay", "--check"], ["recover"]])
def test_a_module_that_fails_to_import_is_one_clear_error_json_under_json(
    tmp_path: Path, command: list[str]
) -> None:
    (tmp_path / "broken.py").write_text('raise RuntimeError("no API key set")\n')
    (tmp_path / "app.py").write_text(APP)
    url = f"sqlite:///{tmp_path / 'j.db'}"
    for target, said in [
        ("broken:engine", "importing broken raised RuntimeError: no API key set"),
        ("missing_module:engine", "No module named 'missing_module'"),
        ("app:nope", "has no attribute 'nope'"),
    ]:
        out = _cli(tmp_path, url, *command, target, "--json")
        assert out.returncode == 1, out.stderr
        assert "Traceback" not in out.stderr
        error = json.loads(out.stdout)["error"]  # JSON, as --json promises, not text
        assert f"cannot load {target}" in error and said in error
        text = _cli(tmp_path, url, *command, target)
        assert text.returncode == 1 and said in text.stderr and "Traceback" not in text.stderr


def test_replay_check_prints_a_run_id_with_brackets_as_it_is(tmp_path: Path) -> None:
    # replay --check writes plain text (click.echo), not rich markup: escaping a run id
    # for rich printed "job\[b]1" for the run "job[b]1", an id no command then finds.
    (tmp_path / "app.py").write_text(APP)
    url = f"sqlite:///{tmp_path / 'j.db'}"
    with durably.Engine(url) as e:

        @e.workflow(name="flow")
        def flow(ctx: durably.Context, x: int) -> int:
            return ctx.step("c", lambda v: v + 1, ctx.step("a", lambda v: v + 1, x))

        e.run(flow, 1, run_id="job[b]1")
    out = _cli(tmp_path, url, "replay", "--check", "app:engine", "--finished", APP_INSERT="1")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "DIVERGES job[b]1 (flow version=-, completed)" in out.stdout, out.stdout
