"""Errors a first user meets (the command line, the Engine) say what happened and what to do."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import durably
from durably.cli import main


@pytest.mark.parametrize("command", ["audit", "recover", "worker"])
def test_a_module_that_is_not_found_says_where_it_is_looked_for(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    # load_engine sets DURABLY_URL from --db; monkeypatch puts the old value back.
    monkeypatch.setenv("DURABLY_URL", f"sqlite:///{tmp_path / 'j.db'}")
    result = CliRunner().invoke(main, [command, "no_such_agents_module:engine"])
    assert result.exit_code == 1, result.output
    assert "No module named 'no_such_agents_module'" in result.output
    assert "run the command from the folder that holds the module" in result.output
    assert "path/to/agents.py:ENGINE" in result.output


def test_a_missing_engine_attribute_says_which_name_to_give(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "myagents.py").write_text("import durably\nengine = durably.Engine()\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DURABLY_URL", f"sqlite:///{tmp_path / 'j.db'}")
    result = CliRunner().invoke(main, ["audit", "myagents:engin"])
    assert result.exit_code == 1, result.output
    assert "has no attribute 'engin'" in result.output
    assert "in place of 'engin'" in result.output


def test_no_journal_with_neither_db_nor_env_says_the_default_was_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DURABLY_URL", raising=False)
    result = CliRunner().invoke(main, ["runs", "list"])
    assert result.exit_code == 1, result.output
    assert "neither --db nor DURABLY_URL was given" in result.output
    assert "sqlite:///durably.db" in result.output
    assert str(tmp_path) in result.output  # where a relative path was looked for
    assert "--db sqlite:///agent.db" in result.output  # what to pass
    assert "from --db" not in result.output  # the user passed no --db


def test_no_journal_at_a_given_url_names_it_and_says_what_to_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DURABLY_URL", raising=False)
    result = CliRunner().invoke(main, ["runs", "show", "r1", "--db", "sqlite:///agnet.db"])
    assert result.exit_code == 1, result.output
    assert "no journal at agnet.db" in result.output
    assert "(from --db sqlite:///agnet.db)" in result.output
    assert "check the path" in result.output


@pytest.mark.parametrize(
    ("typo", "meant"), [("lease", "lease_s"), ("busy_timeout", "busy_timeout_s")]
)
def test_a_misspelt_engine_option_names_the_option_meant(
    typo: str, meant: str, tmp_path: Path
) -> None:
    with pytest.raises(durably.ConfigError) as err:
        durably.Engine(f"sqlite:///{tmp_path / 'j.db'}", **{typo: 5})
    assert f"no option {typo!r}: did you mean {meant!r}" in str(err.value)
    assert not (tmp_path / "j.db").exists()  # refused before anything was opened


def test_an_unknown_option_far_from_any_name_still_gets_the_stores_list(tmp_path: Path) -> None:
    with pytest.raises(durably.ConfigError, match="SQLite store does not take the option"):
        durably.Engine(f"sqlite:///{tmp_path / 'j.db'}", zzz_unrelated=1)


# runs list / runs show in an 80-column terminal or a pipe: tests/unit/test_cli_ids_whole.py


def _incident_engine(tmp_path: Path) -> tuple[durably.Engine, durably.Workflow]:
    engine = durably.Engine(f"sqlite:///{tmp_path / 'j.db'}")

    @engine.workflow(name="incident")
    def incident(ctx: durably.Context, alert: dict[str, str]) -> str:
        return ctx.step("summary", lambda: alert["summary"])

    return engine, incident


@pytest.mark.parametrize(
    ("args", "said"), [((), "missing a required argument: 'alert'"), ((1, 2), "too many")]
)
def test_arguments_the_workflow_cannot_take_create_no_run(
    tmp_path: Path, args: tuple[object, ...], said: str
) -> None:
    """A call mistake used to create the run and fail it with a TypeError, binding the
    run id to the wrong input: the corrected call then raised RunConflict."""
    engine, incident = _incident_engine(tmp_path)
    for call in (engine.run, engine.start):
        with pytest.raises(durably.ConfigError) as err:
            call(incident, *args, run_id="alert-99")
        assert said in str(err.value) and "no run was created" in str(err.value)
        assert "incident(ctx, alert)" in str(err.value)
    with pytest.raises(durably.RunNotFound):
        engine.get_run("alert-99")
    assert engine.run(incident, {"summary": "disk full"}, run_id="alert-99") == "disk full"
    engine.close()


def test_an_existing_run_is_left_to_its_recorded_input(tmp_path: Path) -> None:
    engine, incident = _incident_engine(tmp_path)
    engine.run(incident, {"summary": "disk full"}, run_id="alert-1")
    with pytest.raises(durably.RunConflict):  # as before: the recorded input decides
        engine.run(incident, run_id="alert-1")
    engine.close()


def test_a_value_passed_as_a_step_function_is_named_with_its_article(tmp_path: Path) -> None:
    engine = durably.Engine(f"sqlite:///{tmp_path / 'j.db'}")

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> object:
        return ctx.step("x", 42)

    with pytest.raises(durably.ConfigError, match=r"ctx.step\('x', ...\): an int value is not"):
        engine.run(w, run_id="r")
    engine.close()
