"""The seeded scheduler: simulated processes as greenlets on one thread, a fake clock.

Every simulated process (a worker, its lease keeper, an outside caller) is one or more
greenlets of this one OS thread. A greenlet runs until it reaches a *point*: the start of
a store transaction (:mod:`.store`), a live step's boundary (the engine's fault hook), or
a wait on the clock. There it switches back to the scheduler, which picks, with its one
seeded ``random.Random``, which runnable greenlet goes next and what happens to it there
(nothing, an injected fault, the death or a stall of its process). Nothing else decides
an order: no real thread, no real sleep, no wall clock, so one seed is one interleaving.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

try:
    import greenlet
except ImportError as exc:  # a dev dependency: the library itself never needs it
    raise ImportError(
        "durably.chaos.dst runs its simulated processes as greenlets: pip install greenlet"
        " (or install durably's dev extras: pip install -e '.[dev]')"
    ) from exc


class SimKill(BaseException):
    """Raised inside a simulated process the scheduler killed: it unwinds its greenlet
    while every store call and world effect it still tries is refused (a SIGKILL runs no
    cleanup, so nothing of the unwinding may reach the journal or the world)."""


class Deadlock(Exception):
    """Nothing can run and nothing is waiting on the clock."""


@dataclass(eq=False)
class Proc:
    """A simulated OS process: its greenlets die and stall together."""

    name: str
    alive: bool = True
    frozen_until: float = 0.0
    tasks: list[Task] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(eq=False)
class Task:
    """One greenlet of a process (its main loop, its lease keeper)."""

    proc: Proc
    name: str
    glet: greenlet.greenlet
    wake_at: float = 0.0
    order: int = 0
    # What the scheduler decided for this task at its current point ("" for nothing).
    verdict: str = ""


class Scheduler:
    """Runs the tasks one point at a time, in a seeded order, on a fake clock."""

    def __init__(self, seed: int, start: float = 1_700_000_000.0) -> None:
        self.rng = random.Random(seed)
        self.now = self.start = start
        self.tasks: list[Task] = []
        self.current: Task | None = None
        self.main = greenlet.getcurrent()
        self.actions = 0
        self.killed = False  # a process died since the last step: unwind its tasks
        self.tx_s = 0.004  # the longest a transaction takes (drawn uniformly up to it)
        self._order = 0
        # Called at each point to choose what happens to the task there: returns a
        # verdict (see Task.verdict); set by the simulation.
        self.decide: Callable[[Task, str, str], str] = lambda task, kind, what: ""
        self.trace: list[tuple[int, float, str, str, str, str]] = []
        # Exceptions that left a task's body (a bug of the simulation or of durably).
        self.escaped: list[tuple[Task, BaseException]] = []
        self.tracing = True

    # -- from inside a task ---------------------------------------------------------------

    def point(self, kind: str, what: str = "") -> str:
        """Give the turn back to the scheduler at a point of ``kind``; returns the verdict
        chosen for this task there. A killed process raises :class:`SimKill`."""
        task = self.current
        if task is None:  # the scheduler itself (setup, final checks): no interleaving
            return ""
        if not task.proc.alive:
            raise SimKill(task.proc.name)
        if kind == "tx":
            # A transaction takes time: the others' waits run out meanwhile, so a caller
            # can act between any two transactions of a worker.
            self.now += self.rng.random() * self.tx_s
        task.verdict = self.decide(task, kind, what)
        if self.tracing:
            self.trace.append(
                (self.actions, self.now - self.start, task.name, kind, what, task.verdict)
            )
        if task.verdict == "kill":
            self.kill(task.proc)
            raise SimKill(task.proc.name)
        if task.verdict == "stall":
            # A pause of the whole process (SIGSTOP, a GC pause, a VM migration).
            task.proc.frozen_until = self.now + task.proc.data.get("stall_s", 1.0)
        self.main.switch()
        if not task.proc.alive:
            raise SimKill(task.proc.name)
        return task.verdict

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` of simulated time (other tasks run meanwhile)."""
        task = self.current
        if task is None:
            self.now += max(0.0, seconds)
            return
        if not task.proc.alive:
            raise SimKill(task.proc.name)
        task.wake_at = self.now + max(0.0, seconds)
        self.main.switch()
        if not task.proc.alive:
            raise SimKill(task.proc.name)

    # -- from the scheduler ---------------------------------------------------------------

    def spawn(self, proc: Proc, name: str, fn: Callable[[], None]) -> Task:
        """A new task of ``proc`` running ``fn`` from its next turn."""

        def body() -> None:
            try:
                fn()
            except SimKill:
                pass
            except BaseException as exc:  # reported, never swallowed
                self.escaped.append((task, exc))

        self._order += 1
        task = Task(proc, name, greenlet.greenlet(body, parent=self.main), self.now, self._order)
        proc.tasks.append(task)
        self.tasks.append(task)
        return task

    def kill(self, proc: Proc) -> None:
        """The process dies at once (its greenlets unwind at the next step)."""
        proc.alive = False
        self.killed = True

    def trace_lines(self) -> list[str]:
        """The trace as text: action, simulated time, task, point, what, verdict."""
        return [
            f"{n} t={at:.3f} {who} {kind} {what} {verdict}".rstrip()
            for n, at, who, kind, what, verdict in self.trace
        ]

    def stop_all(self) -> None:
        """Kill every process and unwind every task now (a greenlet left suspended would
        be unwound by the garbage collector later, in the middle of whatever runs then)."""
        for t in self.tasks:
            t.proc.alive = False
        for _ in range(100):
            self.tasks = [t for t in self.tasks if not t.glet.dead]
            if not self.tasks:
                return
            for t in self.tasks:
                self._switch(t)

    def runnable(self) -> list[Task]:
        now = self.now
        return [
            t
            for t in self.tasks
            if t.wake_at <= now and t.proc.frozen_until <= now and t.proc.alive
        ]

    def step(self) -> bool:
        """Run one task to its next point; False when no task is left."""
        if self.killed:
            # Let killed processes unwind now (their calls are refused).
            self.killed = False
            for t in self.tasks:
                if not t.proc.alive:
                    self._switch(t)
            self.killed = any(not t.glet.dead and not t.proc.alive for t in self.tasks)
        self.tasks = [t for t in self.tasks if not t.glet.dead]
        if not any(t.proc.alive for t in self.tasks):
            return False
        ready = self.runnable()
        if not ready:
            nxt = min(max(t.wake_at, t.proc.frozen_until) for t in self.tasks if t.proc.alive)
            if not math.isfinite(nxt):
                raise Deadlock("every task waits forever")
            self.now = max(self.now, nxt)
            ready = self.runnable()
        task = ready[self.rng.randrange(len(ready))]
        self._switch(task)
        self.actions += 1
        return True

    def _switch(self, task: Task) -> None:
        self.current = task
        try:
            task.glet.switch()
        finally:
            self.current = None


class SimClock:
    """The engine's clock in the simulation: the scheduler's time; ``sleep`` waits on it
    (the task yields, other tasks run)."""

    def __init__(self, sched: Scheduler) -> None:
        self._sched = sched

    def time(self) -> float:
        """The simulated time."""
        return self._sched.now

    def sleep(self, seconds: float) -> None:
        """Wait on the simulated time."""
        self._sched.sleep(seconds)
