"""``durably lint``: each listed pattern in a workflow body is found at its line (the
fixture marks every expected line), ``# durably: ok`` silences a line, code outside a
workflow's body is not reported, and nothing is found in examples/ and chaos/."""

from __future__ import annotations

import json
import re
from pathlib import Path

from click.testing import CliRunner

from durably.cli import main as cli
from durably.lint import RULES, lint_paths, lint_source

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "lint_sample.py"


def expected() -> list[tuple[int, str]]:
    marks = []
    for n, line in enumerate(FIXTURE.read_text().splitlines(), 1):
        m = re.search(r"# expect: ([\w-]+)", line)
        if m:
            marks.append((n, m.group(1)))
    return marks


def test_every_pattern_is_found_at_its_line_and_nothing_else() -> None:
    found = lint_paths([str(FIXTURE)])
    assert [(f.line, f.rule) for f in found] == expected()
    # Every rule of the list is in the fixture.
    assert {r for _, r in expected()} == set(RULES)
    for f in found:
        assert f.col >= 1 and f.why and f.fix


def test_cli_prints_file_line_col_why_and_the_alternative() -> None:
    res = CliRunner().invoke(cli, ["lint", str(FIXTURE)])
    assert res.exit_code == 1
    [first] = [ln for ln in res.output.splitlines() if ":31:" in ln]
    assert first.startswith(f"{FIXTURE}:31:15: wall-clock:") and "ctx.now()" in first
    assert "ctx.random()" in res.output and "ctx.uuid()" in res.output
    assert "ctx.gather" in res.output and "sorted(" in res.output
    assert f"{len(expected())} findings" in res.output
    res = CliRunner().invoke(cli, ["lint", "--json", str(FIXTURE)])
    assert res.exit_code == 1
    rows = json.loads(res.output)
    assert rows[0] == {
        "path": str(FIXTURE),
        "line": 31,
        "col": 15,
        "rule": "wall-clock",
        "why": RULES["wall-clock"][0],
        "fix": RULES["wall-clock"][1],
    }


def test_examples_and_chaos_are_clean() -> None:
    res = CliRunner().invoke(cli, ["lint", str(ROOT / "examples"), str(ROOT / "src/durably/chaos")])
    assert res.exit_code == 0, res.output
    assert "no findings" in res.output


def test_workflows_are_found_by_decorator_and_by_context_annotation() -> None:
    src = (
        "import time\n"
        "@eng.workflow\n"
        "def a(c):\n"
        "    return time.time()\n"
        "def b(x, ctx: 'durably.AsyncContext'):\n"
        "    return time.time()\n"
        "def c(ctx):\n"
        "    return time.time()\n"
    )
    assert [f.line for f in lint_source(src)] == [4, 6]


def test_bad_input_is_met_clearly(tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text("def (:\n")
    res = CliRunner().invoke(cli, ["lint", str(broken)])
    assert res.exit_code == 1 and "syntax" in res.output
    res = CliRunner().invoke(cli, ["lint", str(tmp_path / "missing")])
    assert res.exit_code == 2 and "does not exist" in res.output
    res = CliRunner().invoke(cli, ["lint"])
    assert res.exit_code == 2


def test_run_time_inputs_differ_message_names_ctx_now(tmp_path: Path) -> None:
    """A step input computed from the wall clock differs on replay with no code change:
    the NonDeterminism message says so and names ctx.now(), not only "revert"."""
    import time

    import pytest

    import durably

    with durably.Engine(f"sqlite:///{tmp_path}/j.db", park_wait_s=0) as engine:

        @engine.workflow(name="w")
        def w(ctx: durably.Context) -> object:
            stamp = ctx.step("stamp", str, time.time_ns())  # durably: ok (the point)
            ctx.wait_for_signal("go")
            return stamp

        with pytest.raises(durably.RunParked):
            engine.run(w, run_id="r")
        engine.signal("r", "go")
        with pytest.raises(durably.NonDeterminism) as got:
            engine.resume("r")
        text = str(got.value)
        assert "inputs differ" in text and "If the code did not change" in text
        assert "ctx.now()" in text and "durably lint" in text
