"""`durably chaos --workflow`: a kill at every step x window of a user's workflow."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import durably
from durably.chaos import workflow_chaos as wc
from durably.cli import main

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = f"{ROOT / 'examples' / 'sample_unkeyed.py'}:refund"
DOUBT = f"{Path(__file__).parent / 'doubt_workflow.py'}:charge"


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run where the sample's own files (its engine's journal, its world) are scratch."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SAMPLE_WORLD", str(tmp_path / "world.db"))
    monkeypatch.delenv("DURABLY_URL", raising=False)
    return tmp_path


def _invoke(*args: str) -> Any:
    return CliRunner().invoke(main, ["chaos", *args], catch_exceptions=False)


def test_the_unkeyed_effect_is_reported_and_fails_the_run(in_tmp: Path) -> None:
    result = _invoke("--workflow", SAMPLE, "--args", '["ana", 40]')
    assert result.exit_code == 1, result.output
    assert "UNSAFE" in result.output and "'send_email'" in result.output
    assert "'create_refund'" not in result.output.split("UNSAFE")[1]


def test_json_report_names_every_repeat(in_tmp: Path) -> None:
    result = _invoke("--workflow", SAMPLE, "--args", '["ana", 40]', "--json")
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["unsafe_steps"] == ["send_email"]
    assert [s[1] for s in data["steps"]] == ["draft_reply", "create_refund", "send_email"]
    kills = {(k["name"], k["window"]): k for k in data["kills"]}
    assert len(kills) == 9
    assert all(k["outcome"] == "completed" and k["same_result"] for k in kills.values())
    # Only a kill between an effect and its record makes anything run twice.
    for (name, window), k in kills.items():
        assert bool(k["repeats"]) == (window == "effect"), (name, window)
    model = kills[("draft_reply", "effect")]
    assert model["repeats"][0]["verdict"] == "repeated model call"
    assert model["extra_tokens"] == 1_200
    refund = kills[("create_refund", "effect")]["repeats"][0]
    assert refund["verdict"] == "same key" and refund["same_key"]
    assert len(set(refund["keys"])) == 1 and refund["keys"][0].endswith(":1")
    email = kills[("send_email", "effect")]["repeats"][0]
    assert email["verdict"] == wc.UNKEYED and email["keys"] == [None, None]


def test_allow_repeat_accepts_a_step_known_to_be_safe(in_tmp: Path) -> None:
    result = _invoke("--workflow", SAMPLE, "--args", '["ana", 40]', "--allow-repeat", "send_email")
    assert result.exit_code == 0, result.output
    assert "every kill point resumed safely" in result.output


def test_a_declared_unkeyed_effect_parks_in_doubt_instead_of_repeating(in_tmp: Path) -> None:
    # "plan" is pure: without --allow-repeat its re-run would be flagged, since durably
    # cannot tell a computation from an undeclared side effect.
    result = _invoke(
        "--workflow",
        DOUBT,
        "--args",
        "[21]",
        "--detail",
        "--allow-repeat",
        "plan",
        "--db",
        f"sqlite:///{in_tmp / 'chaos.db'}",
    )
    assert result.exit_code == 0, result.output
    assert "parked in doubt (safe)" in result.output
    assert (in_tmp / "chaos.db").exists()  # --db names the journal the sweep used


def test_a_name_that_is_not_a_workflow_is_refused(in_tmp: Path) -> None:
    result = _invoke("--workflow", f"{ROOT / 'examples' / 'sample_unkeyed.py'}:send_email")
    assert result.exit_code != 0
    assert "not a durably workflow" in result.output


RECORDED = f"{Path(__file__).parent / 'recorded_workflow.py'}:stamped"


def test_same_result_ignores_recorded_now_random_uuid(in_tmp: Path) -> None:
    result = CliRunner().invoke(
        main, ["chaos", "--workflow", RECORDED, "--allow-repeat", "note", "--json"]
    )
    assert result.exit_code == 0, result.output
    assert "real effects and model calls" in result.stderr
    data = json.loads(result.stdout)
    assert data["kills"] and all(k["same_result"] for k in data["kills"]), data["kills"]
    clean = data["clean_result"]
    assert clean["at"] == "<now>" and clean["score"] == "<random>"
    assert clean["ticket"] == "ticket-<uuid>" and clean["note"] == "hello"


def test_mask_recorded_keeps_values_that_were_not_recorded() -> None:
    recorded = [("uuid", {"$uuid": "0f1e2d3c-aaaa"}), ("random", 0.25)]
    value = {"a": "id 0f1e2d3c-aaaa", "b": 0.25, "c": 0.5, "d": [{"$uuid": "0f1e2d3c-aaaa"}]}
    assert wc.mask_recorded(value, recorded) == {
        "a": "id <uuid>",
        "b": "<random>",
        "c": 0.5,
        "d": ["<uuid>"],
    }


TOOLS = f"{Path(__file__).parent / 'tools_workflow.py'}:shop"


def test_tool_kinds_are_honoured_and_parks_are_answered(in_tmp: Path) -> None:
    """Reads and idempotent tools may repeat (no UNSAFE, no --allow-repeat); the signal
    wait and the destructive tool's approval are answered by the harness, so every kill
    point resumes to the end instead of hanging."""
    result = _invoke("--workflow", TOOLS, "--args", '["boots"]', "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [s[1] for s in data["steps"]] == ["search", "set_tag", "order", "cancel_others"]
    assert data["unsafe_steps"] == [] and not data["failed"]
    kills = {(k["name"], k["window"]): k for k in data["kills"]}
    assert all(k["outcome"] == "completed" and k["same_result"] for k in kills.values())
    assert kills[("search", "effect")]["repeats"][0]["verdict"] == "read tool, may repeat"
    tag = kills[("set_tag", "effect")]["repeats"][0]
    assert tag["verdict"] == "idempotent tool, may repeat"
    assert kills[("order", "effect")]["repeats"][0]["verdict"] == "same key"
    assert data["clean_result"] == [
        "boots-1:chosen",
        "ordered boots-1",
        "cancelled all but boots-1",
    ]


def test_park_stop_ends_a_parking_workflow_with_a_message(in_tmp: Path) -> None:
    result = _invoke("--workflow", TOOLS, "--args", '["boots"]', "--park", "stop")
    assert result.exit_code == 1
    assert "did not complete: stopped: the run parked (signal 'go'" in result.output
    assert "--park answer" in result.output


MODES = f"{Path(__file__).parent / 'modes_workflow.py'}:modes"


@pytest.mark.parametrize(
    ("flags", "mode"), [((), "power"), (("--durability", "effects"), "effects")]
)
def test_durability_reaches_every_run_of_the_sweep(
    in_tmp: Path, monkeypatch: pytest.MonkeyPatch, flags: tuple[str, ...], mode: str
) -> None:
    # It was accepted and ignored with --workflow: the sweep's engines ran in power mode.
    class Noting(durably.Engine):
        """The sweep's engine, noting its mode where the forked child's step reads it."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            os.environ["DURABLY_TEST_CHAOS_MODE"] = self.durability  # a child's own env

    monkeypatch.setattr(wc, "Engine", Noting)
    result = _invoke("--workflow", MODES, "--allow-repeat", "mode", "--json", *flags)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["clean_result"] == [mode] and data["durability"] == mode
    text = _invoke("--workflow", MODES, "--allow-repeat", "mode", *flags).output
    assert f"the journal in {mode} durability mode" in text  # the summary line says it
    assert data["kills"] and all(k["same_result"] for k in data["kills"]), data["kills"]


def test_a_contradicting_synchronous_is_refused_before_any_run(in_tmp: Path) -> None:
    result = _invoke(
        "--workflow", MODES, "--durability", "power", "--synchronous", "NORMAL", "--json"
    )
    assert result.exit_code != 0
    assert "synchronous='NORMAL' contradicts durability='power'" in result.output
    assert "(on the command line, --synchronous)" in result.output  # what to drop here
