"""The crash matrix: SIGKILL the incident agent at every step boundary under four policies.

For each policy the agent is killed at 10 steps x 3 windows = 30 points (120 in all):
a forked child runs the agent until the fault hook kills it with a real SIGKILL at the
chosen point, then a second forked child restarts it and runs to completion. The world
database is then audited: writes beyond a clean run's are duplicates, tokens beyond a
clean run's are the price of the crash.

Policies:

* ``none``: no persistence; a restart begins again from scratch.
* ``checkpoint``: the conversation is saved once per turn, after the turn's tool result.
* ``journal``: durably's step journal on the real :class:`~durably.Engine`; the world
  ignores idempotency keys.
* ``journal_keys``: the same journal; the world honours the keys durably sends.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import WINDOWS
from ._fork import EXIT_NOT_KILLED, EXIT_OK, child_error, die_now, spawn, wait_any
from .agent import (
    ALERT_ID,
    STEPS,
    Agent,
    FaultHook,
    World,
    build_workflow,
    run_baseline,
    step_name,
)

POLICIES: tuple[str, ...] = ("none", "checkpoint", "journal", "journal_keys")
LABELS: dict[str, str] = {
    "none": "No persistence",
    "checkpoint": "Checkpoint per turn",
    "journal": "Step journal",
    "journal_keys": "Journal + idempotency keys",
}
RUN_ID = "incident-A-42"
JOBS_MAX = 64


class ChaosError(RuntimeError):
    """The harness itself failed (a kill did not fire, a restart did not finish)."""


@dataclass(frozen=True)
class KillPoint:
    """Where to kill: a policy, a step position (0..9) and a window; None = a clean run."""

    policy: str
    position: int | None = None
    window: str | None = None

    @property
    def slug(self) -> str:
        """A directory name for this point's databases."""
        if self.position is None:
            return f"{self.policy}-clean"
        return f"{self.policy}-{self.position}-{self.window}"


@dataclass(frozen=True)
class KillResult:
    """What one kill-and-restart did to the world."""

    policy: str
    position: int
    step: str
    window: str
    duplicates: int
    extra_tokens: int
    # The journal policies: the tokens the run's spend ledger counted (None otherwise).
    # It equals the meter's bill, crash included: the ledger counts real spend.
    ledger_tokens: int | None = None


@dataclass(frozen=True)
class PolicySummary:
    """One row of the printed table."""

    policy: str
    label: str
    kills: int
    kills_with_duplicates: int
    worst_duplicates: int
    mean_extra_tokens: float
    worst_extra_tokens: int
    clean_tokens: int


@dataclass
class MatrixReport:
    """Every kill's result, the per-policy summaries and how long it took."""

    rows: list[KillResult]
    summaries: list[PolicySummary]
    seconds: float
    jobs: int
    clean: dict[str, dict[str, int]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """Plain data for ``--json``."""
        return {
            "summaries": [asdict(s) for s in self.summaries],
            "kills": [asdict(r) for r in self.rows],
            "clean": self.clean,
            "seconds": round(self.seconds, 3),
            "jobs": self.jobs,
        }


def kill_points(policies: tuple[str, ...] = POLICIES) -> list[KillPoint]:
    """Every kill point: each policy x 10 steps x 3 windows."""
    return [KillPoint(p, pos, w) for p in policies for pos in range(STEPS) for w in WINDOWS]


def _killer(position: int, window: str) -> FaultHook:
    target = (str(position), window)

    def hook(run_id: str, pos: str, name: str, win: str) -> None:
        if (pos, win) == target:
            die_now()

    return hook


def _run_agent(point: KillPoint, folder: Path, kill: bool, store: dict[str, str | None]) -> int:
    """Body of a forked child: run (or restart) the agent under ``point.policy``."""
    world = World(folder / "world.db", honour_keys=point.policy == "journal_keys")
    agent = Agent(world, RUN_ID)
    hook = None
    if kill and point.position is not None and point.window is not None:
        hook = _killer(point.position, point.window)
    if point.policy in ("none", "checkpoint"):
        ckpt = folder / "checkpoint.db" if point.policy == "checkpoint" else None
        run_baseline(agent, hook, ckpt)
    else:
        from ..engine import Engine  # imported in the parent already; cheap here

        engine = Engine(
            f"sqlite:///{folder / 'journal.db'}",
            fault_hook=hook,
            durability=store["durability"],
            synchronous=store["synchronous"],
        )
        engine.run(build_workflow(engine, agent), ALERT_ID, run_id=RUN_ID)
        engine.close()
    world.close()
    return EXIT_NOT_KILLED if hook is not None else EXIT_OK


def _ledger_tokens(folder: Path) -> int:
    """The tokens the journal's spend ledger counted for the run in ``folder``."""
    from ..clock import SystemClock
    from ..store.sqlite import SQLiteStore

    store = SQLiteStore(f"sqlite:///{folder / 'journal.db'}", SystemClock())
    try:
        return store.get_spend(RUN_ID).tokens
    finally:
        store.close()


@dataclass
class _Job:
    point: KillPoint
    folder: Path
    phase: str = "kill"  # kill -> restart, or clean


def run_matrix(
    policies: tuple[str, ...] = POLICIES,
    *,
    workdir: Path | None = None,
    jobs: int | None = None,
    synchronous: str | None = None,
    durability: str | None = None,
    on_done: Callable[[KillPoint], None] | None = None,
) -> MatrixReport:
    """Run the clean runs and every kill point; return the audited results.

    ``jobs`` kill points run at once (default: the number of CPUs), each in its own
    forked children and its own databases. ``durability`` is the journal's durability
    mode (docs/durability.md), ``synchronous`` its SQLite setting (one that contradicts
    the mode is a ``ConfigError``, raised here before any process starts). ``on_done``
    is called as each kill point finishes (for a progress bar).
    """
    from ..store.durability import sqlite_mode

    sqlite_mode(durability, synchronous)  # a contradiction is refused before any fork
    store = {"synchronous": synchronous, "durability": durability}
    jobs = max(1, min(JOBS_MAX, jobs or os.cpu_count() or 1))
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="durably-chaos-", dir=workdir) as tmp:
        todo = deque(_Job(KillPoint(p), Path(tmp) / f"{p}-clean", "clean") for p in policies)
        todo.extend(_Job(kp, Path(tmp) / kp.slug) for kp in kill_points(policies))
        audits = _schedule(todo, jobs, store, on_done)
    seconds = time.perf_counter() - t0
    clean = {p: {k: audits[KillPoint(p)][k] for k in ("writes", "tokens")} for p in policies}
    rows = []
    for kp in kill_points(policies):
        writes, tokens = audits[kp]["writes"], audits[kp]["tokens"]
        assert kp.position is not None and kp.window is not None
        rows.append(
            KillResult(
                kp.policy,
                kp.position,
                step_name(kp.position),
                kp.window,
                writes - clean[kp.policy]["writes"],
                tokens - clean[kp.policy]["tokens"],
                audits[kp].get("ledger"),
            )
        )
    return MatrixReport(rows, summarize(rows, clean), seconds, jobs, clean)


def _schedule(
    todo: deque[_Job],
    jobs: int,
    store: dict[str, str | None],
    on_done: Callable[[KillPoint], None] | None,
) -> dict[KillPoint, dict[str, int]]:
    """Drive the jobs through their forked phases, ``jobs`` at a time; audit each world."""
    active: dict[int, _Job] = {}
    audits: dict[KillPoint, dict[str, int]] = {}

    def start(job: _Job) -> None:
        kill = job.phase == "kill"
        pid = spawn(
            lambda: _run_agent(job.point, job.folder, kill, store),
            job.folder / f"{job.phase}.err",
        )
        active[pid] = job

    while todo or active:
        while todo and len(active) < jobs:
            job = todo.popleft()
            job.folder.mkdir()
            World.create(job.folder / "world.db", honour_keys=False).close()
            start(job)
        ex = wait_any(active)
        job_or_none = active.pop(ex.pid, None)
        if job_or_none is None:
            continue  # not one of ours
        job = job_or_none
        err = job.folder / f"{job.phase}.err"
        if job.phase == "kill":
            if not ex.sigkilled:
                raise ChaosError(
                    f"{job.point.slug}: the agent was not killed at its kill"
                    f" point ({child_error(err, ex)})"
                )
            job.phase = "restart"
            start(job)
            continue
        if ex.code != EXIT_OK:
            raise ChaosError(
                f"{job.point.slug}: the {job.phase} did not finish ({child_error(err, ex)})"
            )
        world = World(job.folder / "world.db", honour_keys=False)
        audits[job.point] = {"writes": world.writes(), "tokens": world.tokens()}
        world.close()
        if job.point.policy.startswith("journal"):
            audits[job.point]["ledger"] = _ledger_tokens(job.folder)
        if on_done is not None and job.point.position is not None:
            on_done(job.point)
    return audits


def summarize(rows: list[KillResult], clean: dict[str, dict[str, int]]) -> list[PolicySummary]:
    """Fold the per-kill results into one table row per policy."""
    out = []
    for policy in clean:
        mine = [r for r in rows if r.policy == policy]
        out.append(
            PolicySummary(
                policy,
                LABELS[policy],
                len(mine),
                sum(r.duplicates > 0 for r in mine),
                max(r.duplicates for r in mine),
                sum(r.extra_tokens for r in mine) / len(mine),
                max(r.extra_tokens for r in mine),
                clean[policy]["tokens"],
            )
        )
    return out


def summary_cells(s: PolicySummary) -> list[str]:
    """The table cells of one summary, formatted like the blog post."""
    pct = 100 * s.worst_extra_tokens / s.clean_tokens if s.clean_tokens else 0.0
    return [
        s.label,
        f"{s.kills_with_duplicates}",
        f"{s.worst_duplicates}",
        f"{round(s.mean_extra_tokens):,}",
        f"{s.worst_extra_tokens:,} (+{pct:.0f}%)",
    ]


SUMMARY_HEADERS = (
    "policy",
    "kills causing duplicate writes (of 30)",
    "worst duplicates in one run",
    "mean extra tokens",
    "worst extra tokens",
)


def plot(summaries: list[PolicySummary], path: Path) -> None:
    """Save the blog post's bar chart (kills causing duplicates, of 30) to ``path``.

    Needs matplotlib (``pip install 'durably[plot]'``); raises ImportError without it.
    """
    import matplotlib

    matplotlib.use("Agg")  # no display needed; must precede pyplot
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    labels = [s.label for s in summaries]
    values = [s.kills_with_duplicates for s in summaries]
    bars = ax.barh(labels[::-1], values[::-1], color="#c0504d")
    ax.bar_label(bars, padding=3)
    ax.set_xlim(0, max(30, *values))
    ax.set_xlabel("kills that caused a duplicate side effect (of 30)")
    ax.set_title("SIGKILL at every step boundary: duplicate writes per policy")
    fig.tight_layout()
    fig.savefig(path, dpi=144)
    plt.close(fig)
