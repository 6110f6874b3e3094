"""`durably bench commit` runs and prints figures (timings are reported, never asserted)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from durably.chaos import commitbench
from durably.cli import main


def test_bench_commit_prints_the_four_methods_and_the_reference(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["bench", "commit", "--samples", "20", "--dir", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    for text in ("durably step (FULL)", "sqlite FULL", "sqlite NORMAL", "3.02 ms", "p99"):
        assert text in result.output
    print(result.output)


def test_bench_commit_json(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["bench", "commit", "--samples", "10", "--json"])
    data = json.loads(result.output)
    assert len(data["figures"]) == 4
    assert all(f["samples"] == 10 and f["median_ms"] > 0 for f in data["figures"])


def test_percentile_is_nearest_rank() -> None:
    assert commitbench.percentile([float(i) for i in range(1, 101)], 99) == 99.0
    assert commitbench.percentile([5.0], 99) == 5.0


def test_a_too_fast_fsync_is_flagged() -> None:
    assert commitbench.CommitFigure("x", 0.01, 0.02, 5, fsyncs=True).suspicious
    assert not commitbench.CommitFigure("x", 0.01, 0.02, 5, fsyncs=False).suspicious
