"""``runs list``, ``runs show`` and ``approvals list`` never cut what a person copies into
the next command (a run id, a step's key, an approval's action and digest prefix): not in
an 80-column terminal, not in a pipe. In a pipe the tables are plain aligned text."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

import durably
from durably.cli import main as cli

RUN_ID = "alert-2026-12-01-incident-0000042-disk-full-on-db-primary"
ACTION = "refund_customer_for_the_duplicate_order_charge"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(scope="module")
def journal(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, str]:
    """A run parked on an approval after an effect step: its id, key, action and digest."""
    url = f"sqlite:///{tmp_path_factory.mktemp('ids') / 'j.db'}"
    with durably.Engine(url, park_wait_s=0) as engine:

        def send(*, idempotency_key: str) -> str:
            return idempotency_key

        @engine.workflow(name="incident_response_workflow_for_the_on_call_team")
        def wf(ctx: durably.Context) -> object:
            ctx.step("open_ticket_in_the_tracker_with_a_long_name", send)
            return ctx.request_approval(ACTION, {"amount": 10, "memo": "x" * 60})

        with pytest.raises(durably.RunParked):
            engine.run(wf, run_id=RUN_ID)
        key = engine.get_run(RUN_ID).key("0")
        digest = engine.pending_approvals()[0].digest[:12]
    return url, key, digest


def _outputs(url: str, env: dict[str, str]) -> dict[str, str]:
    runner = CliRunner(env={"FORCE_COLOR": "", "NO_COLOR": "1", **env})
    out = {}
    for name, args in (
        ("list", ["runs", "list"]),
        ("show", ["runs", "show", RUN_ID]),
        ("approvals", ["approvals", "list"]),
    ):
        result = runner.invoke(cli, [*args, "--db", url], terminal_width=80)
        assert result.exit_code == 0, result.output
        out[name] = _ANSI.sub("", result.output)
    return out


def _whole_on_one_line(text: str, value: str) -> bool:
    return any(value in line for line in text.splitlines())


@pytest.mark.parametrize(
    "env",
    [
        pytest.param({"COLUMNS": "80"}, id="pipe"),
        pytest.param({"COLUMNS": "80", "TTY_COMPATIBLE": "1"}, id="terminal-80"),
        pytest.param({"COLUMNS": "200", "TTY_COMPATIBLE": "1"}, id="terminal-200"),
    ],
)
def test_ids_actions_keys_and_digests_are_never_cut(
    journal: tuple[str, str, str], env: dict[str, str]
) -> None:
    url, key, digest = journal
    out = _outputs(url, env)
    assert _whole_on_one_line(out["list"], RUN_ID), out["list"]
    assert _whole_on_one_line(out["show"], RUN_ID) and _whole_on_one_line(out["show"], key)
    for value in (RUN_ID, ACTION, digest):
        assert _whole_on_one_line(out["approvals"], value), out["approvals"]
    for text in out.values():
        assert "…" not in text.split("args")[0], text  # only the arguments are shortened


def test_a_pipe_gets_plain_aligned_text_with_nothing_cut(journal: tuple[str, str, str]) -> None:
    url, _, _ = journal
    out = _outputs(url, {"COLUMNS": "80"})
    for text in out.values():
        assert not set("│┃━─┏└") & set(text), text
    lines = out["list"].splitlines()
    assert lines[1].split() == [
        "run_id",
        "workflow",
        "version",
        "status",
        "owner",
        "lease",
        "until",
        "starts",
        "created",
        "updated",
    ]
    row = lines[2]
    assert row.startswith(RUN_ID + "  incident_response_workflow_for_the_on_call_team  ")
    # Aligned: each header starts where its column's cells start.
    assert lines[1].index("workflow") == row.index("incident_response")
    assert "parked(approval" in row and "refund_customer_for_the_duplicate_order_charge" in row


def test_a_wide_terminal_still_gets_the_boxed_table(journal: tuple[str, str, str]) -> None:
    url, _, _ = journal
    out = _outputs(url, {"COLUMNS": "200", "TTY_COMPATIBLE": "1"})
    assert "┃ run_id" in out["list"] and f"│ {RUN_ID} │" in out["list"]
