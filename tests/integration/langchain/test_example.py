"""examples/langchain_agent.py does what its docstring says: parks at the refund's
approval, and once approved resumes with the recorded turns replayed and the refund
made once, under its step's key; ``durably lint`` finds nothing in it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from durably.lint import lint_source

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "langchain_agent.py"


def test_the_example_parks_then_refunds_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = importlib.util.spec_from_file_location("langchain_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    db = f"sqlite:///{tmp_path / 'journal.db'}"
    monkeypatch.setattr(sys, "argv", ["langchain_agent.py", "--db", db])
    example.main()
    out = capsys.readouterr().out
    assert "parked: refund {'cents': 4000, 'order_id': 'A-17'}" in out
    assert "durably approve" in out
    monkeypatch.setattr(sys, "argv", ["langchain_agent.py", "--db", db, "--approve"])
    example.main()
    out = capsys.readouterr().out
    assert "Done: refunded 4000 cents on A-17 (key refund-A-17:" in out
    steps = [tuple(line.split()) for line in out.splitlines() if line.startswith("  ")]
    # The first turn's two lookups in ordered branches; the refund asks in its branch
    # (3.0.0 records the ask, 3.0.1 the approval) and runs, approved, at 3.0.2.
    assert steps == [
        ("0", "langchain.support.model"),
        ("1", "durably.gather"),
        ("1.0.0", "langchain.support.tool.lookup_order"),
        ("1.1.0", "langchain.support.tool.lookup_order"),
        ("2", "langchain.support.model"),
        ("3", "durably.gather"),
        ("3.0.0", "langchain.support.tool.refund"),
        ("3.0.1", "request_approval:refund"),
        ("3.0.2", "langchain.support.tool.refund"),
        ("4", "langchain.support.model"),
    ]


def test_durably_lint_accepts_the_example() -> None:
    assert lint_source(EXAMPLE.read_text(), str(EXAMPLE)) == []
