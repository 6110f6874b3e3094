"""A replay mismatch as people read it: ``replay --check``, ``runs why`` and ``runs show``
print its reason with real line breaks (it is several sentences, one a line), and
``runs why --show-values`` prints a recorded prompt's lines as lines. ``replay --check``
judges the runs that will resume under the new code; finished runs only when asked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import durably
from durably.cli import main as cli

OLD_PROMPT = "You are a careful\nincident assistant.\nSummarise the alert."
APP = """
import os
import durably

engine = durably.Engine()


def ask(prompt):
    return "ok"


@engine.workflow(name="triage")
def triage(ctx):
    ctx.step("ask", ask, os.environ.get("APP_PROMPT", {old!r}))
    ctx.sleep(3600)
    return "done"
"""


@pytest.fixture(scope="module")
def journal(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """A parked run, a blocked run and a completed run recorded under OLD_PROMPT, and the
    app whose code asks with APP_PROMPT."""
    folder = tmp_path_factory.mktemp("mismatch")
    app = folder / "app.py"
    app.write_text(APP.format(old=OLD_PROMPT))
    url = f"sqlite:///{folder / 'j.db'}"
    clock = durably.FakeClock()
    with durably.Engine(url, park_wait_s=0, clock=clock) as engine:

        def ask(prompt: str) -> str:
            return "ok"

        prompt = [OLD_PROMPT]  # what the code asks with: changed below for "blocked"

        @engine.workflow(name="triage")
        def triage(ctx: durably.Context) -> str:
            ctx.step("ask", ask, prompt[0])
            ctx.sleep(3600)
            return "done"

        for run_id in ("parked", "blocked", "done"):
            with pytest.raises(durably.RunParked):
                engine.run(triage, run_id=run_id)
        clock.advance(3601)
        assert engine.run(triage, run_id="done") == "done"
        prompt[0] = "a terse assistant"
        with pytest.raises(durably.NonDeterminism):
            engine.run(triage, run_id="blocked")
    return url, app


def _cli(monkeypatch: pytest.MonkeyPatch, url: str, *args: str) -> Result:
    monkeypatch.setenv("DURABLY_URL", url)  # load_engine sets it: restored after the test
    monkeypatch.setenv("APP_PROMPT", "a terse assistant")
    return CliRunner(env={"COLUMNS": "300"}).invoke(cli, [*args, "--db", url])


def test_replay_check_prints_a_mismatch_with_real_line_breaks(
    journal: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, app = journal
    out = _cli(monkeypatch, url, "replay", "--check", f"{app}:engine")
    assert out.exit_code == 1, out.output
    assert "\\n" not in out.output
    lines = out.output.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("DIVERGES parked "))
    assert lines[first].endswith("(inputs differ).")
    assert lines[first + 1].startswith("  argument 'prompt' (0) differs: 58 -> 17 chars"), (
        out.output
    )


def test_runs_why_and_show_print_the_reason_with_real_line_breaks(
    journal: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _ = journal
    for args in (("runs", "why", "blocked"), ("runs", "show", "blocked")):
        out = _cli(monkeypatch, url, *args)
        assert out.exit_code == 0, out.output
        assert "\\n" not in out.output, out.output
        assert "(inputs differ).\n  argument " in out.output, out.output


def test_show_values_prints_a_recorded_prompt_line_by_line(
    journal: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _ = journal
    out = _cli(monkeypatch, url, "runs", "why", "blocked", "--show-values")
    assert out.exit_code == 0, out.output
    assert "\\n" not in out.output, out.output
    values = out.output.split("recorded inputs of step 0", 1)[1]
    assert (
        '"""\n    You are a careful\n    incident assistant.\n    Summarise the alert.\n' in values
    )


def test_replay_check_leaves_finished_runs_out_unless_asked(
    journal: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, app = journal
    default = _cli(monkeypatch, url, "replay", "--check", f"{app}:engine", "--json")
    report = json.loads(default.output)
    assert sorted(r["run_id"] for r in report["diverging"]) == ["blocked", "parked"]
    assert report["checked"] == 2 and report["finished_not_checked"] == 1
    text = _cli(monkeypatch, url, "replay", "--check", f"{app}:engine").output
    assert "1 finished run(s) not checked (--finished checks them too)" in text
    every = _cli(monkeypatch, url, "replay", "--check", f"{app}:engine", "--finished", "--json")
    report = json.loads(every.output)
    assert sorted(r["run_id"] for r in report["diverging"]) == ["blocked", "done", "parked"]
    assert report["finished_not_checked"] == 0
    named = _cli(monkeypatch, url, "replay", "--check", f"{app}:engine", "--status", "completed")
    assert "DIVERGES done " in named.output and named.exit_code == 1
