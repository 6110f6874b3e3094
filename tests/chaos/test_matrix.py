"""The crash matrix: 120 real SIGKILLs, every kill point checked against the policies.

The expected duplicates and extra tokens at each kill point are derived here, from the
policy definitions alone, and compared with what the forked, killed and restarted agents
actually did to the world database.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import durably
from durably.chaos import WINDOWS, matrix
from durably.cli import main

TURN_TOKENS = [4_400 + 1_500 * t for t in range(5)]  # turn k costs 4,400 + 1,500 (k-1)
WRITE_POSITIONS = {3, 5, 9}  # open_ticket, page_oncall, post_status (tool of turns 2, 3, 5)


def lost_positions(policy: str, pos: int, window: str) -> list[int]:
    """Positions whose work was done before the kill and is done again by the restart."""
    done = list(range(pos)) + ([pos] if window != "before" else [])
    if policy == "none":
        return done  # the restart begins from scratch
    if policy == "checkpoint":
        first_of_turn = pos - pos % 2  # the checkpoint is taken after the turn's tool
        return [p for p in done if p >= first_of_turn]
    return [pos] if window == "effect" else []  # the journal loses only the unrecorded step


def expected(policy: str, pos: int, window: str) -> tuple[int, int]:
    """(duplicate writes, extra tokens) of one kill point."""
    lost = lost_positions(policy, pos, window)
    dups = 0 if policy == "journal_keys" else sum(p in WRITE_POSITIONS for p in lost)
    tokens = sum(TURN_TOKENS[p // 2] for p in lost if p % 2 == 0)
    return dups, tokens


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One full run of `durably chaos --json --plot` (120 kills), shared by the tests."""
    png = tmp_path_factory.mktemp("plot") / "matrix.png"
    result = CliRunner().invoke(main, ["chaos", "--json", "--plot", str(png)])
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.output)
    data["png"] = png
    return data


def test_every_kill_point_matches_the_policy_definitions(report: dict[str, Any]) -> None:
    rows = {(r["policy"], r["position"], r["window"]): r for r in report["kills"]}
    assert len(rows) == 120
    for policy in matrix.POLICIES:
        for pos in range(10):
            for window in WINDOWS:
                row = rows[(policy, pos, window)]
                got = (row["duplicates"], row["extra_tokens"])
                assert got == expected(policy, pos, window), (policy, pos, window)


def test_the_journal_spend_ledger_equals_the_meter_at_every_kill_point(
    report: dict[str, Any],
) -> None:
    # Issue 12: the ledger counts real spend. At every kill point, a call repeated after
    # the SIGKILL (the "effect" window) is counted again and replayed steps are not, so
    # the ledger equals what the provider's meter billed, to the token.
    for row in report["kills"]:
        if row["policy"] in ("journal", "journal_keys"):
            billed = report["clean"][row["policy"]]["tokens"] + row["extra_tokens"]
            assert row["ledger_tokens"] == billed, row
        else:
            assert row["ledger_tokens"] is None


def test_clean_runs_cost_37000_tokens_and_three_writes(report: dict[str, Any]) -> None:
    for policy in matrix.POLICIES:
        assert report["clean"][policy] == {"writes": 3, "tokens": 37_000}


def test_summary_is_the_blog_posts_table(report: dict[str, Any]) -> None:
    summaries = [matrix.PolicySummary(**s) for s in report["summaries"]]
    assert [matrix.summary_cells(s) for s in summaries] == [
        ["No persistence", "20", "3", "17,967", "37,000 (+100%)"],
        ["Checkpoint per turn", "6", "1", "6,167", "10,400 (+28%)"],
        ["Step journal", "3", "1", "1,233", "10,400 (+28%)"],
        ["Journal + idempotency keys", "0", "0", "1,233", "10,400 (+28%)"],
    ]
    print(f"120 kills in {report['seconds']:.1f} s")  # reported, not asserted


def test_plot_is_a_png(report: dict[str, Any]) -> None:
    assert Path(report["png"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_says_how_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes the import fail
    result = CliRunner().invoke(main, ["chaos", "--plot", str(tmp_path / "x.png")])
    assert result.exit_code != 0
    assert "pip install 'durably[plot]'" in result.output


def test_detail_lists_every_kill_point(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from durably.cli.proof import _print_matrix

    report = matrix.run_matrix(("journal_keys",), workdir=tmp_path, jobs=2)
    assert [
        r.extra_tokens for r in report.rows if r.window == "effect" and r.position % 2 == 0
    ] == TURN_TOKENS
    _print_matrix(report, True, None)
    out = capsys.readouterr().out
    assert out.count("journal_keys") == 30
    assert "post_status" in out and "10,400" in out


@pytest.mark.parametrize("durability", ["process", "effects"])
def test_the_matrix_under_a_durability_mode_finds_no_duplicate(
    tmp_path: Path, durability: str
) -> None:
    """``durably chaos --durability``: SIGKILL loses nothing acknowledged in any mode, so
    journal keys still give no duplicate write (one policy, bounded for the suite)."""
    report = matrix.run_matrix(("journal_keys",), workdir=tmp_path, jobs=2, durability=durability)
    (summary,) = report.summaries
    assert summary.policy == "journal_keys"
    assert summary.kills > 0
    assert summary.kills_with_duplicates == 0 and summary.worst_duplicates == 0


def test_a_synchronous_that_contradicts_the_mode_is_refused_before_any_kill(
    tmp_path: Path,
) -> None:
    with pytest.raises(durably.ConfigError, match="contradicts durability='process'"):
        matrix.run_matrix(
            ("journal_keys",), workdir=tmp_path, durability="process", synchronous="FULL"
        )
