"""The deterministic simulation (durably.chaos.dst) in the suite: at least 200,000
simulated steps across seeds, each checked against every invariant after every
scheduled action; the same seed gives the same output; a protocol bug put back is
caught. ``make sim`` runs the long form (1,000,000 steps)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from durably.chaos.dst import Config, simulate
from durably.store import sqlite as sqlite_store

# The suite's bounded form: SIM_STEPS simulated steps over SIM_CHUNKS tests of seeds of
# SEED_STEPS each (make sim: DURABLY_SIM_STEPS=1000000).
SIM_STEPS = int(os.environ.get("DURABLY_SIM_STEPS", "200000"))
SEED_STEPS = 5_000
SIM_CHUNKS = 4
SEEDS_PER_CHUNK = -(-SIM_STEPS // (SEED_STEPS * SIM_CHUNKS))


# Ten minutes a chunk of the suite's form (a loaded machine), more for make sim's.
@pytest.mark.timeout(600 * max(1, SIM_STEPS // 200_000))
@pytest.mark.parametrize("chunk", range(SIM_CHUNKS))
def test_seeds_hold_every_invariant(chunk: int) -> None:
    """Every seed of this chunk runs its steps with faults and ends with no violation;
    together the chunks run at least SIM_STEPS simulated steps."""
    total = 0
    first = 1000 * chunk
    for seed in range(first, first + SEEDS_PER_CHUNK):
        rep = simulate(Config(seed=seed, steps=SEED_STEPS, trace=False))
        assert rep.ok, rep.summary() + "\n" + "\n".join(rep.trace[-40:])
        assert rep.faults["lost"] and rep.faults["kill"], "faults were injected"
        total += rep.steps
    assert total >= SEEDS_PER_CHUNK * SEED_STEPS


def test_the_same_seed_gives_the_same_output() -> None:
    """Two runs of one seed: the same summary and the same trace, action by action."""
    a = simulate(Config(seed=7, steps=1500))
    b = simulate(Config(seed=7, steps=1500))
    assert a.summary() == b.summary()
    assert a.trace == b.trace
    assert a.steps >= 1500


def _first_violation(workloads: tuple[str, ...], seeds: range, steps: int) -> str | None:
    for seed in seeds:
        rep = simulate(Config(seed=seed, steps=steps, workloads=workloads, trace=False))
        if rep.violations:
            return rep.violations[0].invariant
    return None


def test_a_take_signal_retried_after_a_lost_reply_that_hands_another_signal_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A review bug put back: take_signal no longer finds what its first attempt
    consumed (the query taken_signal finds nothing), so a retry after a lost reply takes
    a second signal and the first is lost. The simulator must catch it."""
    monkeypatch.setitem(
        sqlite_store._Q,
        "taken_signal",
        "SELECT seq, data FROM signals WHERE 0 AND run_id = :run_id AND :name = :consumer",
    )
    found = _first_violation(("waits",), range(5, 30), 3000)
    assert found in ("signal-consumed-twice", "signal-handed-differently"), found


def test_a_park_that_misses_a_signal_committed_just_before_it_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A review bug put back: park_run no longer wakes the run at once when a signal it
    waits for was sent while it was still running (between its look and its park), so
    the run sleeps with the signal there. The simulator must catch it."""
    q = sqlite_store._Q["park_run"]
    cut = q[q.index("OR (:wait_signal IS NOT NULL") : q.index("OR (:wait_approval")]
    monkeypatch.setitem(sqlite_store._Q, "park_run", q.replace(cut, ""))
    assert _first_violation(("waits",), range(0, 20), 3000) == "park-missed-signal"


def test_a_decision_that_loses_to_a_later_expiry_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A review bug put back: the driver's expiry no longer yields to a person's decision
    committed first (expire_approval without its outcome IS NULL), so an acknowledged
    approval is overwritten by the expiry. The simulator must catch it."""
    q = sqlite_store._Q["expire_approval"]
    assert "AND outcome IS NULL" in q
    monkeypatch.setitem(sqlite_store._Q, "expire_approval", q.replace("AND outcome IS NULL", ""))
    assert _first_violation(("approval",), range(0, 20), 3000) == "decision-lost"


def test_the_command_prints_steps_and_exits_zero() -> None:
    """python -m durably.chaos.dst prints its steps, the total, exit 0; bad input is a
    usage error naming the choices."""
    cmd = [sys.executable, "-m", "durably.chaos.dst", "--seed", "3", "--steps", "300"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "simulated steps" in out.stdout and "no violation" in out.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "durably.chaos.dst", "--faults", "meteor"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "choose from" in bad.stderr


def test_a_simulation_leaves_durablys_log_level_as_it_found_it() -> None:
    """It quiets the thousands of log lines its faults cause, then puts the level back:
    left at CRITICAL, a later warning of the same process (a journal others can read)
    was never seen, and its once-only guard kept it from ever being logged."""
    import logging

    log = logging.getLogger("durably")
    before = log.level
    simulate(Config(seed=3, steps=200, trace=False))
    assert log.level == before
