"""Real crash tests: a subprocess is SIGKILLed in each window of each step, then restarted.

For every kill point the test asserts, from a separate "world" database: every effect
happened exactly once (the world deduplicates on the idempotency key), no step recorded
before the kill ran again (executions are counted outside the journal), the step killed
after its effect re-ran with the same key, and the final result equals a clean run's.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from .scripts import run_script, runs_listed

AGENT = Path(__file__).with_name("agent.py")
RUN_ID = "alert-42"
# position -> the name of the step function's execution counter
SYNC_STEPS = {
    "0": "model:disk full on db-3",
    "1": "open_ticket",
    "3": "page_oncall",
    "4": "read:logs",
    "5": "post_status",
    "6": None,
}
ASYNC_STEPS = {
    "0": "model:disk full on db-3",
    "1.0.0": "open_ticket",
    "1.1.0": "page_oncall",
    "1.2.0": "read:logs",
    "2": None,
}
EFFECTS = {"open_ticket": "ticket", "page_oncall": "page", "post_status": "status"}
WINDOWS = ("before", "effect", "recorded")


def run_agent(tmp: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_script(AGENT, tmp, RUN_ID, *extra)


def world_counts(tmp: Path) -> tuple[Counter[str], dict[str, int], int]:
    """Executions per step, requests per effect kind, and effect rows."""
    with sqlite3.connect(tmp / "world.db") as w:
        execs = Counter(r[0] for r in w.execute("SELECT step FROM executions"))
        requests = dict(w.execute("SELECT kind, requests FROM effects").fetchall())
        rows = w.execute("SELECT count(*) FROM effects").fetchone()[0]
    return execs, requests, rows


@pytest.fixture(scope="module")
def clean_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = {}
    for mode, extra in (("sync", ()), ("async", ("--async",))):
        tmp = tmp_path_factory.mktemp(f"clean-{mode}")
        done = run_agent(tmp, *extra)
        assert done.returncode == 0, done.stderr
        out[mode] = json.loads(done.stdout)
    return out


def assert_same_result(got: dict[str, Any], clean: dict[str, Any]) -> None:
    """A resumed run returns what a clean run returns. In the async agent the gather's
    effects run concurrently in step threads, so which one the world numbers first (the
    ``#N`` of ``ticket#N``/``page#N``) is timing: compare those up to their order, and the
    summary as built from the effects this run got."""
    if "status" in clean:  # the sync agent: one order, one result
        assert got == clean
        return
    assert got.keys() == clean.keys()
    numbers = sorted(int(got[k].split("#")[1]) for k in ("ticket", "page"))
    assert numbers == sorted(int(clean[k].split("#")[1]) for k in ("ticket", "page"))
    assert [got[k].split("#")[0] for k in ("ticket", "page")] == ["ticket", "page"]
    assert got["summary"] == f"plan for {got['ticket']} {got['page']} 3"


def summarize_name(execs: Counter[str]) -> str:
    return next(k for k in execs if k.startswith("model:ticket#"))


@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("position", list(SYNC_STEPS))
def test_sigkill_in_every_window_of_every_step(
    tmp_path: Path, clean_results: dict[str, Any], position: str, window: str
) -> None:
    killed = run_agent(tmp_path, "--kill", f"{position}:{window}")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    resumed = run_agent(tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout) == clean_results["sync"]
    _assert_exactly_once(tmp_path, SYNC_STEPS, position, window, effects=3)


@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("position", list(ASYNC_STEPS))
def test_sigkill_inside_a_gather(
    tmp_path: Path, clean_results: dict[str, Any], position: str, window: str
) -> None:
    killed = run_agent(tmp_path, "--async", "--kill", f"{position}:{window}")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    # The branches' sync steps run concurrently in step threads: a sibling that was in
    # flight, not yet recorded, when the process died may run again (with the same key).
    in_flight = set(ASYNC_STEPS) - recorded_positions(tmp_path) - {position}
    resumed = run_agent(tmp_path, "--async")
    assert resumed.returncode == 0, resumed.stderr
    assert_same_result(json.loads(resumed.stdout), clean_results["async"])
    _assert_exactly_once(tmp_path, ASYNC_STEPS, position, window, effects=2, in_flight=in_flight)


@pytest.mark.parametrize(("position", "window"), [("4", "recorded"), ("3", "effect")])
@pytest.mark.parametrize("durability", ["power", "process", "effects"])
def test_sigkill_under_each_durability_mode(
    tmp_path: Path, clean_results: dict[str, Any], durability: str, position: str, window: str
) -> None:
    """A SIGKILL loses nothing acknowledged in every mode (the modes differ only on power
    loss and OS crashes, which no test here can cause): a pure step killed after its
    record (process and effects modes commit it without an fsync) does not run again, an
    effect killed after it ran runs again with the same key, each effect lands once."""
    mode = ("--durability", durability)
    killed = run_agent(tmp_path, *mode, "--kill", f"{position}:{window}")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    resumed = run_agent(tmp_path, *mode)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout) == clean_results["sync"]
    _assert_exactly_once(tmp_path, SYNC_STEPS, position, window, effects=3)


def recorded_positions(tmp: Path) -> set[str]:
    """Positions with a result in the journal."""
    with sqlite3.connect(tmp / "journal.db") as j:
        return {r[0] for r in j.execute("SELECT position FROM steps WHERE status != 'intent'")}


def _assert_exactly_once(
    tmp: Path,
    steps: dict[str, str | None],
    position: str,
    window: str,
    effects: int,
    in_flight: set[str] | None = None,
) -> None:
    execs, requests, rows = world_counts(tmp)
    assert rows == effects  # every effect landed exactly once
    names = {pos: (name or summarize_name(execs)) for pos, name in steps.items()}
    with sqlite3.connect(tmp / "journal.db") as j:
        (incarnation,) = j.execute("SELECT incarnation FROM runs").fetchone()
    # The restart after the kill kept the run's incarnation, so every key stays the same.
    assert len(incarnation) == 12
    for pos, name in names.items():
        # Only the step killed between its effect and its record may run again (and in a
        # gather, a sibling that was in flight without a record); no recorded step does.
        expected = {2} if (pos == position and window == "effect") else {1}
        if in_flight and pos in in_flight:
            # Killed anywhere in its call: perhaps before its request reached the world.
            expected = {1, 2}
            if name in EFFECTS:
                assert 1 <= requests[EFFECTS[name]] <= execs[name]
        elif name in EFFECTS:
            assert requests[EFFECTS[name]] == execs[name]  # the re-run carried the same key
        assert execs[name] in expected, (pos, name, execs)
        with sqlite3.connect(tmp / "world.db") as w:
            keys = {r[0] for r in w.execute("SELECT key FROM executions WHERE step=?", (name,))}
        assert keys == {f"{RUN_ID}:{incarnation}:{pos}"}, (pos, keys)  # every run: one key


def test_an_unkeyed_effect_killed_in_flight_parks_in_doubt(tmp_path: Path) -> None:
    killed = run_agent(tmp_path, "--unkeyed", "--kill", "5:effect")
    assert killed.returncode == -signal.SIGKILL
    resumed = run_agent(tmp_path, "--unkeyed")
    assert resumed.returncode == 3, resumed.stderr
    assert "post_status" in json.loads(resumed.stdout)["in_doubt"]
    execs, _, _ = world_counts(tmp_path)
    assert execs["post_status"] == 1  # not retried blindly
    assert [r["run_id"] for r in runs_listed(tmp_path, "--status", "in_doubt")] == [RUN_ID]


FLAKY_RATE = 0.3  # of appends, finishes and releases failing (busy, dropped, disk full)


@pytest.mark.parametrize(
    ("mode", "kill"),
    [
        ("sync", "1:effect"),
        ("sync", "3:recorded"),
        ("sync", "5:before"),
        ("sync", "6:effect"),
        ("async", "1.1.0:effect"),
        ("async", "2:recorded"),
    ],
)
def test_sigkill_with_a_store_failing_at_random(
    tmp_path: Path, clean_results: dict[str, Any], mode: str, kill: str
) -> None:
    """The store fails transiently at random appends, finishes and releases (before or
    after writing) in every process, one of which is SIGKILLed: no run ends ``failed``
    for a store error, and every effect lands exactly once."""
    extra = ("--async",) if mode == "async" else ()
    steps, effects = (ASYNC_STEPS, 2) if mode == "async" else (SYNC_STEPS, 3)
    seed = sum(map(ord, kill))
    killed = run_agent(tmp_path, *extra, "--kill", kill, "--flaky", f"{seed}:{FLAKY_RATE}")
    position, window = kill.split(":")
    # Async branches' sync steps run concurrently in step threads: a sibling in flight,
    # not yet recorded, when the process died may run again (with the same key).
    in_flight = set(steps) - recorded_positions(tmp_path) - {position} if extra else set()
    stopped = 0
    for attempt in range(1, 6):
        assert run_status(tmp_path) != "failed", (killed.stderr, killed.stdout)
        done = run_agent(tmp_path, *extra, "--flaky", f"{seed + attempt}:{FLAKY_RATE}")
        if done.returncode == 0:
            break
        # A store failure past the retry budget stops the run, resumable; never failed.
        assert done.returncode == 4 and "store_error" in done.stdout, done.stderr
        stopped += 1
    assert done.returncode == 0, done.stderr
    assert_same_result(json.loads(done.stdout), clean_results[mode])
    assert run_status(tmp_path) == "completed"
    injected = (tmp_path / "injected.log").read_text().splitlines()
    assert injected, "the store was to fail at random and never did"
    if killed.returncode == -signal.SIGKILL and not stopped:
        _assert_exactly_once(tmp_path, steps, position, window, effects, in_flight)
    else:  # a step in flight when a process stopped may have run again, under its key
        assert world_counts(tmp_path)[2] == effects


def run_status(tmp: Path) -> str | None:
    with sqlite3.connect(tmp / "journal.db") as j:
        row = j.execute("SELECT status FROM runs WHERE run_id = ?", (RUN_ID,)).fetchone()
    return None if row is None else str(row[0])
