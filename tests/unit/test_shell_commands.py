"""Commands durably prints for a person to copy (`runs why`, error messages) quote every
word that comes from the journal: a run id may hold blanks, quotes, `;` or `$(...)`, or
start with `-`, and the command pasted into a shell must do exactly what it says."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

import durably
from durably.cli import main as cli
from durably.shell import command

HOSTILE = ["x; touch pwned", "$(id)", "a'b", "-rf", "--db=evil", "plain-id"]


@pytest.mark.parametrize("run_id", HOSTILE)
def test_a_printed_command_reads_back_as_exactly_its_words(run_id: str) -> None:
    text = command("retry", run_id)
    words = shlex.split(text)
    assert words[:2] == ["durably", "retry"] and words[-1] == run_id
    if run_id.startswith("-"):
        assert words[2] == "--"  # after it, the command line reads no option
    fork = shlex.split(command("fork", run_id, options="--at 3"))
    assert fork.count(run_id) == 1 and fork[fork.index("--at") + 1] == "3"


@pytest.mark.parametrize("run_id", ["x; touch pwned", "-rf"])
def test_runs_why_prints_a_retry_command_that_is_safe_to_paste(tmp_path: Path, run_id: str) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    with durably.Engine(url) as e:

        @e.workflow(name="w")
        def w(ctx: durably.Context) -> None:
            ctx.step("a", lambda: 1)
            raise ValueError("boom")

        with pytest.raises(durably.WorkflowFailed):
            e.run(w, run_id=run_id)
    res = CliRunner().invoke(cli, ["runs", "why", "--db", url, "--json", "--", run_id])
    assert res.exit_code == 0, res.output
    sentence = json.loads(res.output)["sentence"]
    [printed] = re.findall(r"`(durably retry[^`]*)`", sentence)
    words = shlex.split(printed)
    assert words[-1] == run_id
    # And the command works as printed (through click, which sees the shell's words);
    # --db goes right after the command name, before any "--".
    res = CliRunner().invoke(cli, [words[1], "--db", url, *words[2:]])
    assert res.exit_code == 0, res.output
