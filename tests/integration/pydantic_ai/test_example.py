"""examples/pydantic_ai_agent.py does what its docstring says: parks at the refund's
approval, and once approved resumes with the recorded turns replayed and the refund
made once, under its step's key."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "pydantic_ai_agent.py"


def test_the_example_parks_then_refunds_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = importlib.util.spec_from_file_location("pydantic_ai_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    db = f"sqlite:///{tmp_path / 'journal.db'}"
    monkeypatch.setattr(sys, "argv", ["pydantic_ai_agent.py", "--db", db])
    example.main()
    out = capsys.readouterr().out
    assert "parked: pydantic_ai.support.tool.refund" in out and "durably approve" in out
    monkeypatch.setattr(sys, "argv", ["pydantic_ai_agent.py", "--db", db, "--approve"])
    example.main()
    out = capsys.readouterr().out
    assert "Done: refunded 4000 cents on A-17 (key refund-A-17:" in out
    steps = [tuple(line.split()) for line in out.splitlines() if line.startswith("  ")]
    # Each turn's tool calls in a group of ordered branches; an approval and its call
    # in the call's own branch.
    assert steps == [
        ("0", "pydantic_ai.support.model.request"),
        ("1", "durably.gather"),
        ("1.0.0", "pydantic_ai.support.tool.lookup_order"),
        ("2", "pydantic_ai.support.model.request"),
        ("3", "durably.gather"),
        ("3.0.0", "request_approval:pydantic_ai.support.tool.refund"),
        ("3.0.1", "pydantic_ai.support.tool.refund"),
        ("4", "pydantic_ai.support.model.request"),
    ]
