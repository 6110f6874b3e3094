"""Real crashes for the spend ledger (issue 12): a model call repeated after a SIGKILL in
its ``effect`` window (the call returned and was billed, its result not yet recorded) is
counted once more, and the steps that replay are not counted again. The ledger is read
through the real ``durably runs show --json``; the provider's bill is a separate database
the agent writes before answering."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .scripts import run_script

AGENT = Path(__file__).with_name("budget_agent.py")
PLAN, DRAFT, REVIEW = 100, 1000, 500  # tokens of one call of each step (budget_agent.PRICES)


def bill(tmp: Path) -> list[tuple[str, int]]:
    with sqlite3.connect(tmp / "world.db") as w:
        return w.execute("SELECT step, tokens FROM bill ORDER BY rowid").fetchall()


def shown(tmp: Path, run_id: str) -> dict[str, Any]:
    db = f"sqlite:///{tmp / 'journal.db'}"
    out = subprocess.run(
        [sys.executable, "-m", "durably.cli", "runs", "show", run_id, "--json", "--db", db],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    data: dict[str, Any] = json.loads(out.stdout)
    return data


@pytest.mark.parametrize("mode", [(), ("--async",)], ids=["sync", "async"])
def test_a_call_repeated_after_sigkill_is_counted_once_more_and_replays_never(
    tmp_path: Path, mode: tuple[str, ...]
) -> None:
    killed = run_script(AGENT, tmp_path, "w-1", "--kill-at-effect", "draft", *mode)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    # The draft call returned and was billed; its ledger row committed before the crash.
    assert bill(tmp_path) == [("plan", PLAN), ("draft", DRAFT)]
    spend = shown(tmp_path, "w-1")["spend"]
    assert (spend["tokens"], spend["ledger_entries"]) == (PLAN + DRAFT, 2)

    resumed = run_script(AGENT, tmp_path, "w-1", *mode)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout) == {"review": "review(draft(plan(budgets)))"}
    # plan replayed (not called, not counted); draft was called again: real spend, counted.
    assert bill(tmp_path) == [
        ("plan", PLAN),
        ("draft", DRAFT),
        ("draft", DRAFT),
        ("review", REVIEW),
    ]
    data = shown(tmp_path, "w-1")
    spend = data["spend"]
    assert spend["tokens"] == PLAN + 2 * DRAFT + REVIEW == sum(t for _, t in bill(tmp_path))
    assert spend["ledger_entries"] == 4
    assert (spend["input_tokens"], spend["output_tokens"]) == (
        60 + 2 * 700 + 400,
        40 + 2 * 300 + 100,
    )
    assert spend["cost_usd"] == pytest.approx(0.01 + 2 * 0.1 + 0.05)
    # Each step's record keeps the usage of the execution that recorded it.
    assert [s["usage_tokens"] for s in data["steps"]] == [PLAN, DRAFT, REVIEW]

    again = run_script(AGENT, tmp_path, "w-1", *mode)  # finished: replays nothing, adds nothing
    assert again.returncode == 0, again.stderr
    assert shown(tmp_path, "w-1")["spend"]["tokens"] == PLAN + 2 * DRAFT + REVIEW


def test_the_repeated_call_is_what_crosses_the_budget(tmp_path: Path) -> None:
    # Budget 2,000: plan + draft (1,100) fit; the draft repeated after the crash makes
    # 2,100, so the run stops at review (never called) and ends failed, draft recorded.
    budget = ("--budget-tokens", "2000")
    killed = run_script(AGENT, tmp_path, "w-2", "--kill-at-effect", "draft", *budget)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    resumed = run_script(AGENT, tmp_path, "w-2", *budget)
    assert resumed.returncode == 3, resumed.stderr
    failure = json.loads(resumed.stdout)
    assert failure["error_type"] == "durably.errors.BudgetExceeded"
    assert "2,100 tokens, more than its budget of 2,000" in failure["message"]
    assert bill(tmp_path) == [("plan", PLAN), ("draft", DRAFT), ("draft", DRAFT)]
    data = shown(tmp_path, "w-2")
    assert data["spend"]["tokens"] == 2100
    assert data["spend"]["budget"] == {"tokens": 2000, "cost_usd": None}
    assert [(s["seq"], s["kind"], s["status"]) for s in data["steps"]] == [
        ("0", "step", "ok"),
        ("1", "step", "ok"),
        ("2", "halt", "ok"),
    ]
