"""``durably approvals list``, ``durably approve`` and ``durably reject`` on both stores: the
action and arguments are shown (escaped) before deciding, the digest prefix is checked,
nothing prompts, and every refusal exits non-zero with a clear message."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner, Result

import durably
from durably.cli import main as cli

# Journal text is untrusted: an action and arguments that try to drive the terminal.
ACTION = "refund\x1b[2J"
ARGS = {"amount": 20, "memo": "\x1b]0;owned\x07 café", "lines": "a\rb"}


@pytest.fixture
def parked(journal_url: str) -> Iterator[tuple[durably.Engine, str]]:
    with durably.Engine(journal_url, park_wait_s=0) as engine:

        @engine.workflow(name="wf")
        def wf(ctx: durably.Context) -> Any:
            d = ctx.request_approval(ACTION, ARGS, timeout_s=3600)
            return [d.outcome, d.by, d.note]

        with pytest.raises(durably.RunParked):
            engine.run(wf, run_id="r1")
        yield engine, journal_url


def cmd(url: str, *args: str) -> Result:
    return CliRunner().invoke(cli, [*args, "--db", url])


def test_list_shows_the_request_and_json_has_the_full_digest(
    parked: tuple[durably.Engine, str],
) -> None:
    engine, url = parked
    [p] = engine.pending_approvals()
    res = cmd(url, "approvals", "list", "--json")
    assert res.exit_code == 0, res.output
    [row] = json.loads(res.output)
    assert row["run_id"] == "r1" and row["request_id"] == "0" and row["action"] == ACTION
    assert row["args"] == ARGS and row["digest"] == p.digest
    assert row["expires_at"] == pytest.approx(row["requested_at"] + 3600)
    res = cmd(url, "approvals", "list")
    assert res.exit_code == 0 and p.digest[:12] in res.output
    assert "\x1b" not in res.output and "\r" not in res.output
    res = cmd(url, "approvals", "list", "--run", "other", "--json")
    assert json.loads(res.output) == []


def test_approve_prints_the_action_and_args_then_decides_once(
    parked: tuple[durably.Engine, str],
) -> None:
    engine, url = parked
    digest = engine.pending_approvals()[0].digest
    res = cmd(url, "approve", "r1", "0", "--digest", digest[:4].upper(), "--by", "ana")
    assert res.exit_code == 0, res.output
    assert "refund\\x1b[2J" in res.output and "\\u001b]0;owned\\u0007 café" in res.output
    assert "\x1b" not in res.output and "\r" not in res.output
    assert f"digest:  {digest}" in res.output
    assert "approved run r1 request 0 by ana" in res.output
    assert engine.run("wf", run_id="r1") == ["approved", "ana", None]
    again = cmd(url, "reject", "r1", "0", "--digest", digest[:6], "--reason", "no")
    assert again.exit_code == 1
    assert "already approved (by 'ana')" in again.output and "nothing was changed" in again.output


def test_a_prefix_that_does_not_match_decides_nothing(parked: tuple[durably.Engine, str]) -> None:
    engine, url = parked
    digest = engine.pending_approvals()[0].digest
    wrong = "0000" if not digest.startswith("0000") else "ffff"
    res = cmd(url, "approve", "r1", "0", "--digest", wrong)
    assert res.exit_code == 1
    assert f"--digest {wrong} does not match" in res.output and "Nothing was decided" in res.output
    assert engine.pending_approvals()[0].digest == digest  # still waiting


def test_reject_needs_a_reason_and_passes_it_as_the_note(
    parked: tuple[durably.Engine, str],
) -> None:
    engine, url = parked
    digest = engine.pending_approvals()[0].digest
    res = cmd(url, "reject", "r1", "0", "--digest", digest[:10])
    assert res.exit_code == 2 and "--reason" in res.output
    res = cmd(url, "reject", "r1", "0", "--digest", digest[:10], "--reason", "dup", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["outcome"] == "rejected" and out["note"] == "dup" and out["digest"] == digest
    assert engine.run("wf", run_id="r1") == ["rejected", None, "dup"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["approve", "nope", "0", "--digest", "abcd"], "no run 'nope'"),
        (["approve", "r1", "9", "--digest", "abcd"], "no approval request '9'"),
        (["approve", "r1", "0", "--digest", "abc"], "at least 4"),
        (["approve", "r1", "0", "--digest", "wxyz"], "at least 4"),
    ],
)
def test_unknown_run_request_or_bad_prefix_exit_non_zero(
    parked: tuple[durably.Engine, str], argv: list[str], message: str
) -> None:
    _, url = parked
    res = cmd(url, *argv)
    assert res.exit_code != 0 and message in res.output


def test_json_errors_are_json(parked: tuple[durably.Engine, str]) -> None:
    _, url = parked
    res = cmd(url, "approve", "r1", "0", "--digest", "0000", "--json")
    if res.exit_code == 0:  # the 1-in-65536 digest starting 0000
        return
    assert res.exit_code == 1 and "does not match" in json.loads(res.output)["error"]


def test_help_says_it_never_prompts() -> None:
    for name in ("approve", "reject"):
        res = CliRunner().invoke(cli, [name, "--help"])
        assert res.exit_code == 0 and "Never prompts" in res.output and "--digest" in res.output
    res = CliRunner().invoke(cli, ["approvals", "list", "--help"])
    assert res.exit_code == 0 and "--json" in res.output
