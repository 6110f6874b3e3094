"""The Monte-Carlo experiment on the real engine, with a fixed seed (deterministic in CI).

Each figure is compared with the chapter's (scaled to the number of tasks) within 5% or
three standard errors, whichever is wider; the standard error is estimated from batch
means (ten independent batches of tasks), so the test assumes no model of the variance.
"""

from __future__ import annotations

import json
import math
import random
import statistics
from dataclasses import replace

import pytest
from click.testing import CliRunner

from durably.chaos import simulate as sim
from durably.cli import main

# 1,000 tasks in ten batches (2,000 took 15 s of the suite): every figure still within 5% or
# three batch standard errors of the chapter's, scaled; `durably simulate` runs 20,000.
TASKS = 1_000
BATCHES = 10
SEED = 5


@pytest.fixture(scope="module")
def batches() -> dict[str, list[sim.StrategyResult]]:
    """Each strategy over TASKS tasks, as BATCHES independent batches of tasks."""
    cfg = sim.SimConfig(tasks=TASKS, seed=SEED)
    return {
        s: [sim.run_chunk(s, cfg, sim._split(TASKS, BATCHES, k)) for k in range(BATCHES)]
        for s in sim.STRATEGIES
    }


def _check(name: str, values: list[float], seed_total: float) -> None:
    total = sum(values)
    se = math.sqrt(len(values)) * statistics.stdev(values)
    target = seed_total * TASKS / 20_000
    assert abs(total - target) <= max(0.05 * target, 3 * se), (name, total, target, se)


@pytest.mark.parametrize("strategy", sim.STRATEGIES)
def test_figures_agree_with_the_chapter(
    batches: dict[str, list[sim.StrategyResult]], strategy: str
) -> None:
    crashes, calls, _, dups = sim.SEED_FIGURES[strategy]
    rows = batches[strategy]
    _check(f"{strategy} crashes", [r.crashes for r in rows], crashes)
    _check(f"{strategy} model calls", [r.model_calls for r in rows], calls)
    extra = [r.model_calls - TASKS / BATCHES * sim.MODEL_STEPS for r in rows]
    _check(f"{strategy} extra calls", extra, calls - 20_000 * sim.MODEL_STEPS)
    if strategy == "keys":
        assert sum(r.duplicate_emails for r in rows) == 0
    else:
        _check(f"{strategy} duplicates", [r.duplicate_emails for r in rows], dups)


def test_both_journals_see_the_same_crashes(batches: dict[str, list[sim.StrategyResult]]) -> None:
    for a, b in zip(batches["journal"], batches["keys"], strict=True):
        assert (a.crashes, a.model_calls) == (b.crashes, b.model_calls)


def test_no_crash_after_the_effect_means_no_duplicates_and_no_extra_calls() -> None:
    cfg = sim.SimConfig(tasks=300, seed=SEED, crash_after_effect=0.0)
    out = sim.run(cfg, ("journal",))["journal"]
    assert out.crashes > 0
    assert out.duplicate_emails == 0
    assert out.model_calls == 300 * sim.MODEL_STEPS


def test_a_fresh_key_per_attempt_protects_nothing() -> None:
    cfg = sim.SimConfig(tasks=500, seed=SEED, key_mode="random")
    out = sim.run(cfg, ("journal", "keys"))
    assert out["keys"].duplicate_emails == out["journal"].duplicate_emails > 0


def test_a_short_dedupe_window_lets_duplicates_back_and_find_window_finds_the_edge() -> None:
    cfg = sim.SimConfig(tasks=400, seed=SEED, in_flight=10)
    assert sim.run(replace(cfg, dedupe_window=1), ("keys",))["keys"].duplicate_emails > 0
    w, at_w, below = sim.find_window(cfg)
    assert w > 1 and at_w == 0 and below > 0


def test_saga_leaves_no_orphaned_report() -> None:
    out = sim.run(sim.SimConfig(tasks=600, seed=SEED, saga=True), ("journal", "keys"))
    for r in out.values():
        assert r.failed_emails > 0
        assert r.compensated == r.failed_emails
        assert r.orphaned_reports == 0


def test_reordered_steps_raise_nondeterminism_through_the_engine() -> None:
    message = sim.reorder_demo()
    assert message.startswith("step 1: history has 'fetch orders'")
    assert "code asked for 'analyze'" in message


def test_cli_prints_the_table_and_the_nondeterminism_message() -> None:
    result = CliRunner().invoke(main, ["simulate", "--tasks", "200", "--jobs", "2"])
    assert result.exit_code == 0, result.output
    for text in ("in-memory state", "journal + keys", "duplicate emails", "NonDeterminism: step 1"):
        assert text in result.output
    data = json.loads(
        CliRunner().invoke(main, ["simulate", "--tasks", "200", "--json", "--saga"]).output
    )
    assert data["strategies"]["keys"]["duplicate_emails"] == 0
    assert data["strategies"]["keys"]["orphaned_reports"] == 0


def _chapter_program(tasks: int, strategy: str, seed: int) -> tuple[int, int, int]:
    """The chapter's durable.py loop (no engine): crashes, model calls, duplicate emails."""
    rng = random.Random(seed)
    crashes = calls = 0
    sent: dict[int, int] = {}
    seen: set[str] = set()
    for task in range(tasks):
        done = 0
        while True:
            if strategy == "memory":
                done = 0
            try:
                for i in range(done, len(sim.STEPS)):
                    if rng.random() < 0.03:
                        raise sim.Crash
                    kind = sim.STEPS[i][1]
                    calls += kind == "model"
                    key = f"{task}:{i}"
                    if kind == "email" and not (strategy == "keys" and key in seen):
                        seen.add(key)
                        sent[task] = sent.get(task, 0) + 1
                    if rng.random() < 0.03:
                        raise sim.Crash
                    done = i + 1
                break
            except sim.Crash:
                crashes += 1
    return crashes, calls, sum(n - 1 for n in sent.values())


@pytest.mark.parametrize("strategy", sim.STRATEGIES)
def test_one_stream_reproduces_the_chapters_program_exactly(strategy: str) -> None:
    cfg = sim.SimConfig(tasks=300, seed=SEED, one_stream=True)
    r = sim.run(cfg, (strategy,), jobs=2)[strategy]
    assert (r.crashes, r.model_calls, r.duplicate_emails) == _chapter_program(300, strategy, SEED)
