"""The Monte-Carlo experiment of the durable-execution chapter, on the real replay engine.

Each task is a six-step workflow (three model calls, a read, a file write, an email) run by
:class:`~durably.Engine`. The engine's fault hook injects a crash with probability
``crash_before`` before each live step's effect and ``crash_after_effect`` after the effect
but before its record. The crash is a ``BaseException`` the workflow cannot catch; the
engine gives the run back untouched, and the same process resumes it at once, which is what
a second worker would do after a real crash. Strategies:

* ``memory``: progress lives in process memory; a crashed task restarts from scratch
  (a new run, its journal abandoned).
* ``journal``: the task resumes from its journal; the mail service ignores keys.
* ``keys``: the journal, and the mail service deduplicates on the step's idempotency key.

Every task draws its crashes from its own random stream (seeded from the seed and the task
number), so results do not depend on how tasks are split over processes, and the two
journal strategies see the same crashes. With ``one_stream`` all tasks share one stream,
as in the chapter's program, whose figures the engine then reproduces exactly.
"""

from __future__ import annotations

import json
import random
import secrets
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import durably

from ._fork import EXIT_OK, child_error, spawn, wait_any

STEPS: tuple[tuple[str, str], ...] = (
    ("plan", "model"),
    ("fetch orders", "read"),
    ("analyze", "model"),
    ("write report", "write"),
    ("email finance", "email"),
    ("summarize", "model"),
)
MODEL_STEPS = sum(kind == "model" for _, kind in STEPS)
STRATEGIES: tuple[str, ...] = ("memory", "journal", "keys")
LABELS = {"memory": "in-memory state", "journal": "journal", "keys": "journal + keys"}
SEED_FIGURES = {
    "memory": (8_805, 73_294, 22.2, 1_894),
    "journal": (7_518, 61_839, 3.1, 618),
    "keys": (7_518, 61_839, 3.1, 0),
}
"""The chapter's table for 20,000 tasks: crashes, model calls, extra %, duplicate emails."""
SAGA_FAILURE_P = 0.01
TASKS_MAX = 10_000_000
ATTEMPTS_PER_TASK_MAX = 10_000


class Crash(BaseException):
    """An injected crash; a ``BaseException`` so ``except Exception`` cannot swallow it."""


class EmailRejected(Exception):
    """The mail service refused the message for good (the saga exercise)."""


@dataclass(frozen=True)
class SimConfig:
    """One experiment. ``key_mode`` is ``stable`` (the step's key) or ``random`` (a fresh
    key per attempt, which protects nothing). ``dedupe_window`` forgets a key after that
    many attempts (all tasks counted); ``in_flight`` tasks are interleaved, a crashed task
    resuming after a random number of other attempts. ``one_stream`` draws all crashes
    from one stream, as the chapter's program does (reproducing its figures exactly at
    its seed), at the price of running each strategy in one process."""

    tasks: int = 20_000
    seed: int = 5
    crash_before: float = 0.03
    crash_after_effect: float = 0.03
    key_mode: str = "stable"
    dedupe_window: int | None = None
    in_flight: int = 1
    saga: bool = False
    one_stream: bool = False


@dataclass
class StrategyResult:
    """One row of the table."""

    strategy: str
    crashes: int = 0
    model_calls: int = 0
    duplicate_emails: int = 0
    failed_emails: int = 0
    compensated: int = 0
    orphaned_reports: int = 0
    resend_gaps: list[int] = field(default_factory=list)

    def extra_pct(self, tasks: int) -> float:
        """Model calls beyond the crash-free ``3 x tasks``, in percent."""
        ideal = tasks * MODEL_STEPS
        return 100.0 * (self.model_calls - ideal) / ideal if ideal else 0.0

    def add(self, other: StrategyResult) -> None:
        """Fold another chunk's counts into this one."""
        for f in (
            "crashes",
            "model_calls",
            "duplicate_emails",
            "failed_emails",
            "compensated",
            "orphaned_reports",
        ):
            setattr(self, f, getattr(self, f) + getattr(other, f))
        self.resend_gaps.extend(other.resend_gaps)


class Mailer:
    """The email service: with a key it deduplicates (within a window); without, it cannot.

    ``clock`` counts attempts across all tasks; a key seen more than ``window`` attempts
    ago has been forgotten. ``resend_gaps`` records, for every keyed resend, how many
    attempts separated it from the first send: the smallest window with no duplicates is
    their maximum.
    """

    def __init__(self, window: int | None) -> None:
        self.window = window
        self.clock = 0
        self.delivered: Counter[int] = Counter()
        self.seen: dict[str, int] = {}
        self.resend_gaps: list[int] = []

    def send(self, task: int, key: str | None) -> None:
        """Deliver the task's email unless ``key`` was seen within the window."""
        if key is not None:
            first = self.seen.get(key)
            if first is not None:
                self.resend_gaps.append(self.clock - first)
                if self.window is None or self.clock - first <= self.window:
                    return  # a retry of a request already served
            self.seen[key] = self.clock
        self.delivered[task] += 1


class _Injector:
    """The fault hook: draws from the current task's stream at both crash points."""

    def __init__(self, before: float, after: float) -> None:
        self.before = before
        self.after = after
        self.rng = random.Random(0)

    def __call__(self, run_id: str, position: str, name: str, window: str) -> None:
        # Always draw, even at probability 0, so every setting sees the same stream.
        if window == "before" and self.rng.random() < self.before:
            raise Crash(f"{run_id} {position} before")
        if window == "effect" and self.rng.random() < self.after:
            raise Crash(f"{run_id} {position} effect")


class _Sim:
    """One strategy's engine, world and counters."""

    def __init__(self, strategy: str, cfg: SimConfig) -> None:
        self.strategy = strategy
        self.cfg = cfg
        self.injector = _Injector(cfg.crash_before, cfg.crash_after_effect)
        # One in-memory journal per strategy and process: the experiment counts crashes
        # and calls, not fsyncs, and :memory: keeps 20,000 tasks well inside a minute.
        self.engine = durably.Engine(
            "sqlite:///:memory:", fault_hook=self.injector, max_starts=ATTEMPTS_PER_TASK_MAX
        )
        self.mailer = Mailer(cfg.dedupe_window)
        self.reports: dict[int, str] = {}
        self.result = StrategyResult(strategy)
        self.workflow = self._register()

    def _register(self) -> durably.Workflow:
        res, mailer, reports, cfg = self.result, self.mailer, self.reports, self.cfg
        keyed = self.strategy == "keys"

        def model(task: int, name: str) -> str:
            res.model_calls += 1
            return f"{name} for task {task}"

        def read(task: int, name: str) -> list[int]:
            return [task, task + 1]

        def write_report(task: int, name: str) -> str:
            reports[task] = f"report {task}"  # a file at a fixed path: rewriting is harmless
            return f"reports/{task}.md"

        def email(task: int, name: str, idempotency_key: str) -> str:
            if cfg.saga and _email_fails(cfg.seed, task):
                raise EmailRejected(f"finance mailbox rejected task {task}")
            key = None
            if keyed:
                key = secrets.token_hex(8) if cfg.key_mode == "random" else idempotency_key
            mailer.send(task, key)
            return "sent"

        def delete_report(task: int) -> None:
            reports.pop(task, None)

        fns: dict[str, Callable[..., Any]] = {
            "model": model,
            "read": read,
            "write": write_report,
            "email": email,
        }

        @self.engine.workflow(name="task")
        def task_wf(ctx: durably.Context, task: int) -> str:
            for name, kind in STEPS:
                try:
                    ctx.step(name, fns[kind], task, name)
                except durably.StepFailed:
                    # The saga: undo the report the failed email was about, durably.
                    ctx.step("delete report", delete_report, task)
                    return "compensated"
            return "done"

        return task_wf

    def attempt(self, task: int, run_id: str) -> bool:
        """One attempt at a task; False when an injected crash ended it."""
        self.mailer.clock += 1
        try:
            outcome = self.engine.run(self.workflow, task, run_id=run_id)
        except Crash:
            self.result.crashes += 1
            return False
        if outcome == "compensated":
            self.result.failed_emails += 1
            self.result.compensated += 1
        return True

    def finish(self, tasks: range) -> StrategyResult:
        """Count duplicates and orphans; close the engine."""
        self.engine.close()
        r = self.result
        r.duplicate_emails = sum(n - 1 for n in self.mailer.delivered.values() if n > 1)
        failed = [t for t in tasks if self.cfg.saga and _email_fails(self.cfg.seed, t)]
        r.orphaned_reports = sum(t in self.reports for t in failed)
        r.resend_gaps = self.mailer.resend_gaps
        return r


def _email_fails(seed: int, task: int) -> bool:
    # A permanent property of the task (not of the attempt): a retry fails again.
    return random.Random(f"{seed}:saga:{task}").random() < SAGA_FAILURE_P


def run_chunk(strategy: str, cfg: SimConfig, tasks: range) -> StrategyResult:
    """Run ``tasks`` under ``strategy`` in this process and count what happened."""
    sim = _Sim(strategy, cfg)
    sched = random.Random(f"{cfg.seed}:schedule")
    attempts: Counter[int] = Counter()
    # The chapter's program draws every task's crashes from one stream seeded with the
    # seed; ``one_stream`` does the same (and then tasks cannot be split over processes).
    shared = random.Random(cfg.seed) if cfg.one_stream else None
    streams: dict[int, random.Random] = {}  # each in-flight task's own crash stream
    flight: list[int] = []
    upcoming = iter(tasks)
    while True:
        while len(flight) < cfg.in_flight:
            nxt = next(upcoming, None)
            if nxt is None:
                break
            flight.append(nxt)
            streams[nxt] = shared or random.Random(f"{cfg.seed}:{nxt}")
        if not flight:
            break
        # With several tasks in flight, the next attempt belongs to a random one, so a
        # crashed task resumes after a random number of other tasks' attempts.
        i = sched.randrange(len(flight)) if len(flight) > 1 else 0
        task = flight[i]
        sim.injector.rng = streams[task]
        attempts[task] += 1
        if attempts[task] > ATTEMPTS_PER_TASK_MAX:
            raise RuntimeError(f"task {task} crashed {ATTEMPTS_PER_TASK_MAX} times in a row")
        run_id = f"task-{task}" if strategy != "memory" else f"task-{task}.{attempts[task]}"
        if sim.attempt(task, run_id):
            flight.pop(i)
            del streams[task], attempts[task]
    return sim.finish(tasks)


def run(
    cfg: SimConfig, strategies: tuple[str, ...] = STRATEGIES, jobs: int = 1
) -> dict[str, StrategyResult]:
    """Run every strategy over ``cfg.tasks`` tasks, split over ``jobs`` forked processes.

    Splitting is exact when tasks do not interleave (``in_flight == 1`` and no dedupe
    window): every task has its own crash stream. Otherwise each strategy runs in one
    process, because the dedupe window counts attempts across all tasks.
    """
    if not 1 <= cfg.tasks <= TASKS_MAX:
        raise ValueError(f"tasks={cfg.tasks}: choose 1..{TASKS_MAX}")
    shared_clock = cfg.in_flight > 1 or cfg.dedupe_window is not None or cfg.one_stream
    # Several chunks per job keep both cores busy to the end.
    parts = 1 if shared_clock or jobs <= 1 else 2 * jobs
    units = [(s, _split(cfg.tasks, parts, k)) for s in strategies for k in range(parts)]
    if jobs <= 1 or len(units) == 1:
        out: dict[str, StrategyResult] = {}
        for s, r in units:
            out.setdefault(s, StrategyResult(s)).add(run_chunk(s, cfg, r))
        return out
    return _run_forked(cfg, units, jobs)


def _split(n: int, parts: int, k: int) -> range:
    return range(n * k // parts, n * (k + 1) // parts)


def _run_forked(
    cfg: SimConfig, units: list[tuple[str, range]], jobs: int
) -> dict[str, StrategyResult]:
    out: dict[str, StrategyResult] = {}
    with tempfile.TemporaryDirectory(prefix="durably-sim-") as tmp:
        todo = list(enumerate(units))
        active: dict[int, tuple[int, str]] = {}
        while todo or active:
            while todo and len(active) < jobs:
                idx, (strategy, tasks) = todo.pop(0)
                path = Path(tmp) / f"{idx}.json"
                pid = spawn(
                    partial(_chunk_child, strategy, cfg, tasks, path),
                    Path(tmp) / f"{idx}.err",
                )
                active[pid] = (idx, strategy)
            ex = wait_any(active)
            if ex.pid not in active:
                continue
            idx, strategy = active.pop(ex.pid)
            if ex.code != EXIT_OK:
                raise RuntimeError(
                    f"simulation worker for {strategy} failed:"
                    f" {child_error(Path(tmp) / f'{idx}.err', ex)}"
                )
            data = json.loads((Path(tmp) / f"{idx}.json").read_text())
            out.setdefault(strategy, StrategyResult(strategy)).add(StrategyResult(**data))
    return {s: out[s] for s in dict.fromkeys(s for s, _ in units)}


def _chunk_child(strategy: str, cfg: SimConfig, tasks: range, path: Path) -> int:
    r = run_chunk(strategy, cfg, tasks)
    path.write_text(json.dumps(r.__dict__))
    return EXIT_OK


def find_window(cfg: SimConfig, jobs: int = 1) -> tuple[int, int, int]:
    """The smallest dedupe window (in attempts) with zero duplicates under keys.

    One run with an unbounded window records every keyed resend's gap; the answer is the
    largest gap. Two checking runs confirm it: ``W`` gives zero duplicates and ``W - 1``
    gives some. Returns ``(W, duplicates at W, duplicates at W - 1)``.
    """
    probe = run(replace(cfg, dedupe_window=None, in_flight=max(cfg.in_flight, 1)), ("keys",), jobs)[
        "keys"
    ]
    w = max(probe.resend_gaps, default=0)
    at_w = run(replace(cfg, dedupe_window=w), ("keys",), jobs)["keys"].duplicate_emails
    below = (
        run(replace(cfg, dedupe_window=w - 1), ("keys",), jobs)["keys"].duplicate_emails
        if w > 0
        else 0
    )
    return w, at_w, below


def reorder_demo() -> str:
    """Replay an old history against code with two steps swapped; return the error text.

    A run of the original six steps crashes after recording three of them; a new engine
    (a deploy) registers the same workflow name with "fetch orders" and "analyze" swapped
    and resumes the run through the real engine, which refuses with ``NonDeterminism``.
    """

    def step_fn(task: int, name: str) -> str:
        return f"{name} for task {task}"

    def crash_at_3(run_id: str, position: str, name: str, window: str) -> None:
        if position == "3" and window == "before":
            raise Crash("deploy")

    def make(order: tuple[tuple[str, str], ...]) -> Callable[..., str]:
        def task(ctx: durably.Context, n: int) -> str:
            for name, _ in order:
                ctx.step(name, step_fn, n, name)
            return "done"

        return task

    new_order = (STEPS[0], STEPS[2], STEPS[1], *STEPS[3:])
    with tempfile.TemporaryDirectory(prefix="durably-reorder-") as tmp:
        url = f"sqlite:///{Path(tmp) / 'journal.db'}"
        with durably.Engine(url, fault_hook=crash_at_3) as old:
            try:
                old.run(old.workflow(name="task")(make(STEPS)), 0, run_id="task-0")
            except Crash:
                pass
        with durably.Engine(url) as new:
            try:
                new.run(new.workflow(name="task")(make(new_order)), 0, run_id="task-0")
            except durably.NonDeterminism as exc:
                return str(exc)
    raise RuntimeError("the reordered code replayed without NonDeterminism")
