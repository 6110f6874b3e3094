"""`durably --help` is a new user's map: every command listed with a one-line summary.

Click cuts a summary that does not fit its column with "...", mid-sentence; so each
command and subcommand carries a summary short enough for an 80-column terminal.
"""

from __future__ import annotations

import click
from click.testing import CliRunner

from durably.cli import COMMANDS, main


def _help(args: list[str]) -> str:
    result = CliRunner().invoke(main, [*args, "--help"], terminal_width=80)
    assert result.exit_code == 0, result.output
    return result.output


def _command_lines(output: str) -> dict[str, str]:
    """The ``Commands:`` section as name -> summary (continuation lines joined)."""
    lines = output.split("Commands:\n", 1)[1].splitlines()
    found: dict[str, str] = {}
    last = ""
    for line in lines:
        if line.startswith("    ") and last:
            found[last] += " " + line.strip()  # a wrapped summary: not one line
            found[last] += " <wrapped>"
        elif line.strip():
            name, _, summary = line.strip().partition(" ")
            found[name] = summary.strip()
            last = name
    return found


def test_top_level_help_lists_every_command_with_a_whole_summary() -> None:
    listed = _command_lines(_help([]))
    assert set(listed) == set(COMMANDS)
    for name, summary in listed.items():
        assert summary, f"{name} has no summary"
        assert not summary.endswith("..."), f"durably {name}: summary cut: {summary!r}"
        assert "<wrapped>" not in summary, f"durably {name}: summary takes two lines"


def test_every_group_lists_its_subcommands_with_a_whole_summary() -> None:
    ctx = click.Context(main)
    groups = [n for n in COMMANDS if isinstance(main.get_command(ctx, n), click.Group)]
    assert {"runs", "approvals", "bench"} <= set(groups)
    for group in groups:
        listed = _command_lines(_help([group]))
        assert listed, group
        for name, summary in listed.items():
            assert summary and not summary.endswith("..."), f"durably {group} {name}: {summary!r}"
            assert "<wrapped>" not in summary, f"durably {group} {name}: two lines"


def test_an_unknown_command_names_the_nearest_and_where_a_workflow_runs() -> None:
    run = CliRunner().invoke(main, ["run", "x"])
    assert run.exit_code == 2
    assert "No such command 'run'. Did you mean 'runs'" in run.output  # (or 'prune')
    assert "engine.run(wf, ...)" in run.output and "durably worker MODULE:ENGINE" in run.output
    typo = CliRunner().invoke(main, ["aprove"])
    assert typo.exit_code == 2 and "Did you mean 'approve'" in typo.output
    nothing = CliRunner().invoke(main, ["frobnicate"])
    assert nothing.exit_code == 2 and "Did you mean" not in nothing.output
    assert "`durably --help` lists the commands" in nothing.output
