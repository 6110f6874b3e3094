"""What the CLI prints from the journal: escaped, JSON on failure with --json, logging.

Step errors are often model or tool output (issue 9 §3 "Terminal output"): rich markup in
them must not crash ``runs show`` and escape sequences must not reach the terminal.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import textwrap
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import durably
from durably.cli import main

from .cli_support import start_worker

HOSTILE = "[/link] [bold]x\x1b]8;;http://evil\x1b\\click\x1b]8;;\x1b\\ \x1b[2J\r\x9b1m\u202eevil"


def invoke(*args: str) -> Any:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture
def hostile_db(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    with durably.Engine(url) as engine:

        @engine.workflow(name="wf[/]\x1b[31m")
        def wf(ctx: durably.Context) -> str:
            ctx.step("ok [/link]\x1b[1m", lambda: HOSTILE)
            ctx.step("boom[/]", _raise)
            return "unreachable"

        with pytest.raises(durably.WorkflowFailed):
            engine.run(wf, run_id="run-hostile")
    # New run ids with control characters are refused (their keys would be too), so the
    # hostile id is one an older durably stored, or a hand edit: the CLI must still show
    # it inert.
    conn = sqlite3.connect(tmp_path / "j.db")
    with conn:
        for table in ("runs", "steps"):
            conn.execute(
                f"UPDATE {table} SET run_id = ? WHERE run_id = 'run-hostile'",
                ("run[/]\x1b[5m",),
            )
    conn.close()
    return url


def _raise() -> None:
    raise RuntimeError(HOSTILE)


def _assert_inert(text: str) -> None:
    for ch in ("\x1b", "\r", "\x9b", "\u202e"):
        assert ch not in text, repr(text)


def test_runs_show_and_list_escape_markup_and_control_characters(hostile_db: str) -> None:
    shown = invoke("runs", "show", "run[/]\x1b[5m", "--db", hostile_db)
    assert shown.exit_code == 0, shown.output
    _assert_inert(shown.stdout)
    assert "[/link]" in shown.stdout and "\\x1b" in shown.stdout
    assert "RuntimeError" in shown.stdout
    listed = invoke("runs", "list", "--db", hostile_db)
    assert listed.exit_code == 0, listed.output
    _assert_inert(listed.stdout)
    assert "wf[/]" in listed.stdout


def test_runs_show_prints_cost_next_to_tokens(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    with durably.Engine(url) as engine:

        def model() -> str:
            durably.usage(tokens=1234, cost_usd=0.0123)
            return "ok"

        @engine.workflow(name="w")
        def w(ctx: durably.Context) -> str:
            return str(ctx.step("model", model))

        engine.run(w, run_id="r")
    shown = invoke("runs", "show", "r", "--db", url)
    assert "cost" in shown.stdout and "$0.0123" in shown.stdout and "1,234" in shown.stdout


@pytest.mark.parametrize("command", [["runs", "show", "missing"], ["runs", "list"]])
def test_json_commands_print_json_errors(tmp_path: Path, command: list[str]) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    durably.Engine(url).close()
    bad = f"sqlite:///{tmp_path / 'absent.db'}"
    targets = [bad] if command[1] == "list" else [url, bad]
    for db in targets:
        result = invoke(*command, "--db", db, "--json")
        assert result.exit_code == 1
        data = json.loads(result.stdout)
        assert set(data) == {"error"} and data["error"], data
    (tmp_path / "junk.db").write_bytes(b"not a database at all" * 100)
    result = invoke(*command, "--db", f"sqlite:///{tmp_path / 'junk.db'}", "--json")
    assert result.exit_code == 1
    assert "error" in json.loads(result.stdout)


def _module(tmp_path: Path, url: str) -> Path:
    path = tmp_path / "app" / "agents_file.py"
    path.parent.mkdir()
    path.write_text(
        textwrap.dedent(
            f"""
            import logging
            import durably
            logging.getLogger().addHandler(logging.NullHandler())
            engine = durably.Engine({url!r})

            @engine.workflow(name="hello")
            def hello(ctx, who):
                return ctx.step("greet", lambda: "hi " + who)
            """
        )
    )
    return path


def test_worker_takes_a_file_path_and_logs_each_run_at_info(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    module = _module(tmp_path, url)
    with durably.Engine(url) as engine:

        @engine.workflow(name="hello")
        def hello(ctx: durably.Context, who: str) -> str:
            raise AssertionError("not run here")

        handle = engine.start(hello, "ana", run_id="r1")
    env = {k: v for k, v in os.environ.items() if k != "DURABLY_URL"}
    worker = start_worker(f"{module}:engine", env, tmp_path)
    assert worker.stderr is not None
    lines = []
    for line in worker.stderr:
        lines.append(line)
        if "r1 completed" in line:
            break
    worker.terminate()
    worker.communicate(timeout=120)
    text = "".join(lines)
    assert "claimed run r1 (hello, start 1)" in text, text
    assert "durably.worker" in text
    with durably.Engine(url) as engine:
        assert engine.get_run(handle.run_id).status == "completed"


def test_worker_cli_leaves_the_root_logger_alone(tmp_path: Path) -> None:
    from durably.cli.worker import _log_to_stderr

    root = logging.getLogger()
    before = (list(root.handlers), root.level)
    _log_to_stderr()
    _log_to_stderr()  # idempotent: one handler
    assert (list(root.handlers), root.level) == before
    log = logging.getLogger("durably")
    assert sum(getattr(h, "durably_cli", False) for h in log.handlers) == 1
    assert log.getEffectiveLevel() == logging.INFO
    for h in [h for h in log.handlers if getattr(h, "durably_cli", False)]:
        log.removeHandler(h)
    log.setLevel(logging.NOTSET)


def test_handle_is_public(tmp_path: Path) -> None:
    with durably.Engine(f"sqlite:///{tmp_path / 'j.db'}") as engine:

        @engine.workflow(name="w")
        def w(ctx: durably.Context) -> int:
            return 1

        handle = engine.start(w, run_id="r")
    assert "Handle" in durably.__all__ and isinstance(handle, durably.Handle)


ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_doc_links_stay_inside_the_repository(doc: Path) -> None:
    import re

    root = doc.parents[1] if doc.parent.name == "docs" else doc.parent
    text = doc.read_text()
    assert "../shared" not in text
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if "://" in target or target.startswith("mailto:"):
            continue
        resolved = (doc.parent / target).resolve()
        assert resolved.is_relative_to(root), f"{doc.name} links outside the repo: {target}"
        assert resolved.exists(), f"{doc.name} links to a missing file: {target}"


def test_runs_show_survives_rows_that_do_not_parse(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "j.db"
    with durably.Engine(f"sqlite:///{path}") as engine:

        @engine.workflow(name="w")
        def w(ctx: durably.Context) -> int:
            return int(ctx.step("a", lambda: 1)) + int(ctx.step("b", lambda: 2))

        engine.run(w, run_id="r")
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("UPDATE steps SET output = ? WHERE position = '0'", ("[" * 100_000,))
        conn.execute("UPDATE steps SET output = ? WHERE position = '1'", ("9" * 5000,))
        conn.execute("UPDATE runs SET outcome = 'not json' WHERE run_id = 'r'")
    conn.close()
    result = invoke("runs", "show", "r", "--db", f"sqlite:///{path}", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [s["output"]["unreadable"][:3] for s in data["steps"]] == ["[[[", "999"]
    assert data["run"]["outcome"] == {"unreadable": "not json"}
    table = invoke("runs", "show", "r", "--db", f"sqlite:///{path}")
    assert table.exit_code == 0 and "outcome: not json" in table.stdout


def test_a_worker_logs_each_claim_completion_failure_and_block_at_info(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from durably.worker import Worker

    with durably.Engine(f"sqlite:///{tmp_path / 'j.db'}") as engine:

        @engine.workflow(name="w")
        def w(ctx: durably.Context, what: str) -> Any:
            ctx.step("s", lambda: what)
            if what == "fail":
                raise RuntimeError("model said \x1b[2J no")
            return object() if what == "block" else what

        for what in ("ok", "fail", "block"):
            engine.start(w, what, run_id=what)
        with caplog.at_level(logging.INFO, logger="durably"):
            stats = Worker(engine, concurrency=1, poll_interval_s=0.01).run(max_runs=3)
    assert stats.claimed == 3
    text = "\n".join(r.getMessage() for r in caplog.records if r.name.startswith("durably"))
    for run_id in ("ok", "fail", "block"):
        assert f"claimed run {run_id} (w, start 1)" in text
    assert "run ok completed" in text
    assert "run fail failed" in text and "run block stopped" in text
    assert "blocked" in text
    assert not logging.getLogger().handlers or all(
        getattr(h, "durably_cli", False) is False for h in logging.getLogger().handlers
    )


def test_the_worker_log_handler_shows_control_characters_as_escapes() -> None:
    from durably.cli.worker import _InertFormatter

    record = logging.LogRecord(
        "durably.worker", logging.INFO, __file__, 1, "x%s", ("\x1b[2J",), None
    )
    assert _InertFormatter("%(message)s").format(record) == "x\\x1b[2J"


@pytest.mark.parametrize(
    "output", ["9" * 5000, "[" * 100_000 + "]" * 100_000], ids=["int digits", "nesting"]
)
def test_skip_output_that_python_cannot_parse_is_a_usage_error(tmp_path: Path, output: str) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    durably.Engine(url).close()
    result = CliRunner().invoke(main, ["skip", "r", "--output", output, "--db", url])
    assert result.exit_code == 2, result.exception  # click's usage error, not a crash
    assert "not JSON" in result.output and "--output" in result.output


def _strict(text: str) -> Any:
    def refuse(name: str) -> None:
        raise ValueError(f"bare {name} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_json_output_is_strict_json_with_nan_and_infinity(tmp_path: Path) -> None:
    # json.dumps prints bare NaN/Infinity, which jq refuses: a hand-edited output of bare
    # NaN (durably itself tags non-finite floats) or an infinite time must not produce it.
    import sqlite3

    path = tmp_path / "j.db"
    url = f"sqlite:///{path}"
    with durably.Engine(url) as engine:

        @engine.workflow(name="w")
        def w(ctx: durably.Context) -> Any:
            return [ctx.step("score", lambda: float("nan")), ctx.step("b", lambda: 1)]

        engine.run(w, run_id="r")
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("UPDATE steps SET output = 'NaN' WHERE position = '1'")
        conn.execute("UPDATE steps SET finished_at = ? WHERE position = '1'", (float("-inf"),))
        conn.execute("UPDATE runs SET finished_at = ?", (float("inf"),))
    conn.close()
    shown = _strict(invoke("runs", "show", "r", "--db", url, "--json").stdout)
    assert shown["steps"][0]["output"] == {"$float": "nan"}  # durably's own tag
    assert shown["steps"][1]["output"] == "NaN"
    assert shown["steps"][1]["duration_s"] == "-Infinity"
    assert shown["run"]["finished_at"] == "Infinity"
    assert _strict(invoke("runs", "list", "--db", url, "--json").stdout)[0]["run_id"] == "r"
