"""Commands durably prints for a person to paste quote every word from the journal.

``runs why`` once pasted a queue name into ``durably worker MODULE:ENGINE --queue {name}``
as it was: ``ops;touch${IFS}PWNED;#`` ran ``touch PWNED`` when the hint was pasted into a
shell. Every journal-sourced word in a printed command goes through
:func:`durably.shell.command` / :func:`durably.shell.option`, and a lint below reads every
printer in ``src/durably`` for an interpolation that does not.
"""

from __future__ import annotations

import ast
import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

import durably
from durably.cli import main as cli
from durably.shell import command, option

SRC = Path(durably.__file__).parent
HOSTILE_QUEUES = ["ops;touch${IFS}PWNED;#", "a$(touch PWNED)b", "q`touch PWNED`", "-x 'y'"]

# Calls whose result is safe inside a printed command: they quote journal words.
QUOTING = {"command", "cli_command", "option", "cli_option", "quote", "_worker_command"}
# A command printed for a person: `durably VERB ...` between backticks.
PRINTED = re.compile(r"`durably [a-z]")


def _run_why(url: str, run_id: str) -> str:
    res = CliRunner().invoke(cli, ["runs", "why", "--db", url, "--json", "--", run_id])
    assert res.exit_code == 0, res.output
    sentence: str = json.loads(res.output)["sentence"]
    return sentence


@pytest.mark.parametrize("queue", HOSTILE_QUEUES)
def test_a_pasted_worker_hint_runs_nothing_but_durably_worker(tmp_path: Path, queue: str) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    with durably.Engine(url) as engine:

        @engine.workflow(name="w")
        def w(ctx: durably.Context) -> None:
            ctx.step("a", lambda: 1)

        engine.start(w, run_id="r1", queue=queue)  # queued; no worker serves the queue
    # The hint ends the sentence: "(start one: `durably worker ...`)"; greedy, since a
    # quoted queue name may itself hold a backtick.
    [printed] = re.findall(r"start one: `(durably worker .*)`\)", _run_why(url, "r1"))
    # Pasted into bash, with `durably` a function that records the words it was given.
    script = 'durably() { printf "%s\\n" "$@" > words.txt; }\n' + printed
    subprocess.run(["bash", "-c", script], cwd=tmp_path, check=True, timeout=30)
    assert not (tmp_path / "PWNED").exists(), f"pasting {printed!r} ran a command"
    words = (tmp_path / "words.txt").read_text().splitlines()
    assert words[:2] == ["worker", "MODULE:ENGINE"]
    assert words[2:] in (["--queue", queue], [f"--queue={queue}"])
    # And click reads the queue back exactly (a value starting with "-" included).
    assert shlex.split(printed)[1:] == words


def test_option_quotes_a_value_and_keeps_a_leading_dash_off_the_option_list() -> None:
    assert option("--queue", "default") == "--queue default"
    assert shlex.split(option("--queue", "a b;c")) == ["--queue", "a b;c"]
    assert shlex.split(option("--queue", "-rf")) == ["--queue=-rf"]
    assert shlex.split(command("worker", "M:E", options=option("--queue", "x;y"))) == [
        "durably",
        "worker",
        "M:E",
        "--queue",
        "x;y",
    ]


def _quoting_names(func: ast.AST) -> set[str]:
    """Names a function binds to the result of a quoting call (``cmd = command(...)``)."""
    names: set[str] = set()
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and _is_quoting(node.value):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def _is_quoting(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
    return name in QUOTING


def _unquoted_in_commands(tree: ast.AST) -> list[str]:
    """Interpolations inside a printed `durably ...` command that are neither a quoting
    call nor a name bound to one, as "line: source" strings."""
    found: list[str] = []
    scopes = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    safe_by_node: dict[int, set[str]] = {}
    for scope in scopes:
        names = _quoting_names(scope)
        for node in ast.walk(scope):
            safe_by_node.setdefault(id(node), set()).update(names)
    for node in ast.walk(tree):
        if not isinstance(node, ast.JoinedStr):
            continue
        inside = False  # within a `durably ...` command
        text = ""
        for part in node.values:
            if isinstance(part, ast.Constant) and isinstance(part.value, str):
                for ch_index, _ in enumerate(part.value):
                    text += part.value[ch_index]
                    if PRINTED.search(text[-10:]):
                        inside = True
                    elif inside and part.value[ch_index] == "`":
                        inside = False
                continue
            assert isinstance(part, ast.FormattedValue)
            text += "{}"
            value = part.value
            ok = _is_quoting(value) or (
                isinstance(value, ast.Name) and value.id in safe_by_node.get(id(node), set())
            )
            if inside and not ok:
                found.append(f"{node.lineno}: {ast.unparse(value)}")
    return found


def test_every_printed_command_in_src_quotes_what_it_interpolates() -> None:
    bad: list[str] = []
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        bad += [f"{path.relative_to(SRC)}:{b}" for b in _unquoted_in_commands(tree)]
        for node in ast.walk(tree):
            # str.format / % with a printed command: the lint above cannot read them
            fmt = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            if fmt and node.func.attr == "format":  # type: ignore[union-attr]
                base = node.func.value  # type: ignore[union-attr]
                if isinstance(base, ast.Constant) and PRINTED.search(str(base.value)):
                    bad.append(f"{path.relative_to(SRC)}:{node.lineno}: str.format")
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
                if isinstance(node.left, ast.Constant) and PRINTED.search(str(node.left.value)):
                    bad.append(f"{path.relative_to(SRC)}:{node.lineno}: % format")
    assert not bad, "journal words pasted unquoted into a printed command:\n" + "\n".join(bad)


def test_the_lint_finds_an_unquoted_interpolation() -> None:
    # The lint itself can fail: the shape of the old runs why hint is caught.
    old = (
        "def f(run):\n"
        "    return (f'start one: `durably worker MODULE:ENGINE --queue'\n"
        "            f' {run.queue}`, or `engine.resume({run.run_id!r})`')\n"
        "def g(run_id):\n"
        "    cmd = command('retry', run_id)\n"
        "    return f'`{cmd}` or `durably runs why {command(\"x\", run_id)}`'\n"
    )
    assert _unquoted_in_commands(ast.parse(old)) == ["2: run.queue"]
