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


@pytest.mark.timeout(600)
@pytest.mark.parametrize("chunk", range(SIM_CHUNKS))
def test_seeds_hold_every_invariant(chunk: int) -> None:
    """Every seed of this chunk runs its steps with faults and ends with no violation;
    together the chunks run at least SIM_STEPS simulated steps."""
    total = 0
    first = 1000 * chunk
    for seed in range(first, first + SEEDS_PER_CHUNK):
        rep = simulate(Config(seed=seed, steps=SEED_STEPS))
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


def test_a_take_signal_retried_after_a_lost_reply_that_hands_another_signal_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The review bug put back: take_signal no longer finds what its first attempt
    consumed (the query taken_signal finds nothing), so a retry after a lost reply takes
    a second signal and the first is lost. The simulator must catch it."""
    monkeypatch.setitem(
        sqlite_store._Q,
        "taken_signal",
        "SELECT seq, data FROM signals WHERE 0 AND run_id = :run_id AND :name = :consumer",
    )
    found = None
    for seed in range(5, 30):
        rep = simulate(Config(seed=seed, steps=3000, workloads=("waits",)))
        if rep.violations:
            found = rep.violations[0]
            break
    assert found is not None, "the put-back bug went unnoticed"
    assert found.invariant in ("signal-consumed-twice", "signal-handed-differently")


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
