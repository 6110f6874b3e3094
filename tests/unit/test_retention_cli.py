"""``durably prune`` and ``durably runs delete`` / ``runs list --pruned`` end to end."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner, Result

import durably
from durably.cli import main as cli
from durably.clock import FakeClock


def _cli(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def _journal(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    # Runs of 2023 (the fake clock's epoch): older than any age given below.
    with durably.Engine(url, clock=FakeClock()) as engine:

        @engine.workflow(name="w")
        def w(ctx: durably.Context, n: int) -> int:
            return n

        engine.run(w, 1, run_id="done-1")
        engine.run(w, 2, run_id="done-2")
        engine.start(w, 3, run_id="queued")
    return url


def test_prune_dry_run_then_prune_then_list_pruned(tmp_path: Path) -> None:
    url = _journal(tmp_path)
    dry = _cli("prune", "--finished-before", "30d", "--dry-run", "--json", "--db", url)
    assert dry.exit_code == 0, dry.output
    assert json.loads(dry.output)["run_ids"] == ["done-1", "done-2"]
    assert json.loads(dry.output)["dry_run"] is True
    shown = _cli("runs", "list", "--json", "--db", url)
    assert len(json.loads(shown.output)) == 3, "the dry run pruned"
    real = _cli("prune", "--finished-before", "30d", "--db", url)
    assert real.exit_code == 0 and "pruned 2 run(s) (2 completed)" in real.output, real.output
    pruned = _cli("runs", "list", "--pruned", "--json", "--db", url)
    assert [t["run_id"] for t in json.loads(pruned.output)] == ["done-2", "done-1"]
    table = _cli("runs", "list", "--pruned", "--db", url)
    assert "done-1" in table.output and "pruned" in table.output
    gone = _cli("runs", "show", "done-1", "--db", url)
    assert gone.exit_code == 1 and "pruned" in gone.output
    left = _cli("runs", "list", "--json", "--db", url)
    assert [r["run_id"] for r in json.loads(left.output)] == ["queued"]
    # Removed just now (the CLI runs on the wall clock): a time to come takes them all.
    tombs = _cli("prune", "--tombstones-before", "2100-01-01", "--json", "--db", url)
    assert json.loads(tombs.output)["tombstones"] == 2


def test_runs_delete_and_its_refusals(tmp_path: Path) -> None:
    url = _journal(tmp_path)
    live = _cli("runs", "delete", "queued", "--db", url)
    assert live.exit_code == 1 and "durably cancel queued" in live.output, live.output
    red = _cli("runs", "delete", "done-1", "--redact", "--by", "dpo", "--json", "--db", url)
    assert red.exit_code == 0 and json.loads(red.output)["redacted"] is True, red.output
    shown = _cli("runs", "show", "done-1", "--json", "--db", url)
    assert json.loads(shown.output)["redacted"]["by"] == "dpo"
    deleted = _cli("runs", "delete", "done-2", "--db", url)
    assert deleted.exit_code == 0 and "tombstone kept" in deleted.output


def test_prune_refuses_bad_input_saying_what_to_pass(tmp_path: Path) -> None:
    url = _journal(tmp_path)
    for args, said in (
        ((), "--finished-before 30d"),
        (("--finished-before", "30d", "--status", "running"), "only finished runs"),
        # The message names the option given (it said --since, another command's).
        (("--finished-before", "soon"), "--finished-before 'soon'"),
        (("--tombstones-before", "later"), "--tombstones-before 'later'"),
    ):
        res = _cli("prune", *args, "--db", url)
        assert res.exit_code != 0 and said in res.output, (args, res.output)


def test_a_dry_run_counts_every_tombstone_it_would_remove(tmp_path: Path) -> None:
    """``prune --tombstones-before --dry-run`` listed at most 100,000 tombstones and
    counted those: past that it said fewer than the real prune then removed."""
    import sqlite3

    url = _journal(tmp_path)
    n = 100_001
    with sqlite3.connect(tmp_path / "j.db") as db:
        db.executemany(
            "INSERT INTO tombstones (run_id, workflow, input_digest, status, incarnation,"
            " finished_at, removed_at, how) VALUES (?, 'w', '', 'completed', NULL, 1.0, 1.0,"
            " 'pruned')",
            ((f"t{i}",) for i in range(n)),
        )
    args = ("prune", "--tombstones-before", "1d", "--json", "--db", url)
    dry = _cli(*args, "--dry-run")
    assert json.loads(dry.output)["tombstones"] == n, dry.output
    real = _cli(*args)
    assert json.loads(real.output)["tombstones"] == n, real.output
