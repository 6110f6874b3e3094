"""One simulation: processes, faults, the drain, the final checks (see the package doc)."""

from __future__ import annotations

import logging
import os
import random
import shutil
import tempfile
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

import durably

from ... import codec
from ...errors import DurablyError, StoreError
from ...store.owner import Owner
from .sched import Deadlock, Proc, Scheduler, SimClock, SimKill, Task
from .store import SimStore
from .workloads import CATALOG, Workload, set_world
from .world import Violation, World

LEASE_S = 6.0
# Workloads a caller may also run with engine.run (no outside input to wait for).
IN_PROCESS = ("chain", "fan")
POLL_S = 1.0  # between claims of an idle worker (the real default is 0.2)
TERMINAL = ("completed", "failed", "cancelled", "continued")
# Waiting for a person (a fix of the code, a look at an effect in doubt): the drain does
# not wait for these; the final check asks durably.explain why they wait.
SETTLED = (*TERMINAL, "blocked", "in_doubt", "quarantined")
KINDS = ("busy", "full", "fail", "lost", "killafter", "kill", "stall")


@dataclass(frozen=True)
class Config:
    """One simulation's knobs; with the seed, all its behaviour."""

    seed: int = 0
    steps: int = 2_000
    workers: int = 3
    callers: int = 2
    fault_p: float = 0.05  # of a store transaction drawing a fault
    kill_p: float = 0.01  # of a point killing its process
    stall_p: float = 0.004  # of a point stalling its process past the lease
    faults: tuple[str, ...] = KINDS
    runs_in_flight: int = 8
    drain_s: float = 900.0  # simulated seconds the drain may take
    workloads: tuple[str, ...] = tuple(w.name for w in CATALOG)
    trace: bool = True  # keep the trace (off: faster; a failure is replayed with it on)

    def command(self) -> str:
        """The command line that replays this configuration."""
        out = f"python -m durably.chaos.dst --seed {self.seed} --steps {self.steps}"
        out += f" --workers {self.workers}"
        d = Config()
        if self.callers != d.callers:
            out += f" --callers {self.callers}"
        if self.faults != d.faults:
            out += f" --faults {','.join(self.faults) or 'none'}"
        if self.workloads != d.workloads:
            out += f" --workloads {','.join(self.workloads)}"
        return out


@dataclass
class Report:
    """What one simulation did and found."""

    config: Config
    steps: int = 0
    live_steps: int = 0
    replayed_steps: int = 0
    actions: int = 0
    runs: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)
    violations: list[Violation] = field(default_factory=list)
    trace: list[str] = field(default_factory=list)
    unfinished: list[str] = field(default_factory=list)
    sim_seconds: float = 0.0
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.violations

    def summary(self) -> str:
        """The deterministic lines (no timings)."""
        c = self.config
        lines = [
            f"seed {c.seed}: {self.steps} simulated steps ({self.live_steps} live,"
            f" {self.replayed_steps} replayed), {self.actions} scheduled actions,"
            f" {self.runs} runs, {self.sim_seconds:.1f} simulated s",
            "outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(self.outcomes.items())),
            "faults: " + ", ".join(f"{k} {v}" for k, v in sorted(self.faults.items())),
        ]
        for u in self.unfinished:
            lines.append("resumable: " + u)
        for v in self.violations:
            lines.append(v.line())
        return "\n".join(lines)


@dataclass
class RunPlan:
    """A run a caller started: its workload and input."""

    run_id: str
    workload: Workload
    args: tuple[Any, ...]
    forked_from: str | None = None


class Simulation:
    """The processes of one simulation around one journal file."""

    def __init__(self, cfg: Config) -> None:
        if cfg.callers < 1 or cfg.workers < 1 or cfg.steps < 1:
            raise ValueError("a simulation needs a caller (who starts runs), a worker and steps")
        self.cfg = cfg
        self.sched = Scheduler(cfg.seed)
        self.sched.tracing = cfg.trace
        self.clock = SimClock(self.sched)
        base = "/dev/shm" if os.path.isdir("/dev/shm") else None
        self.dir = tempfile.mkdtemp(prefix="durably-dst-", dir=base)
        self.path = os.path.join(self.dir, "journal.db")
        self.url = f"sqlite:///{self.path}"
        self.world = World(self.sched, self.path)
        self.sched.decide = self._decide
        self.workloads = [w for w in CATALOG if w.name in cfg.workloads]
        self.plans: dict[str, RunPlan] = {}
        self.report = Report(cfg)
        self.draining = False
        self.npid = 0
        self.nrun = 0
        self.procs: list[Proc] = []
        self.restart_at: dict[str, float] = {}

    # -- faults ----------------------------------------------------------------------------

    def _decide(self, task: Task, kind: str, what: str) -> str:
        cfg, rng = self.cfg, self.sched.rng
        if self.draining or task.proc.data.get("role") == "setup":
            return ""
        faults = cfg.faults
        r = rng.random()
        verdict = ""
        if kind == "tx":
            if r < cfg.fault_p:
                choice = rng.choice(("busy", "full", "fail", "lost", "lost", "killafter"))
                if choice in faults:
                    verdict = choice
            elif r < cfg.fault_p + cfg.kill_p and "kill" in faults:
                verdict = "kill"
            elif r < cfg.fault_p + cfg.kill_p + cfg.stall_p and "stall" in faults:
                verdict = "stall"
        elif kind == "step":
            if r < cfg.kill_p * 2 and "kill" in faults:
                verdict = "kill"
            elif (
                what.endswith("recorded") and r < cfg.kill_p * 2 + cfg.stall_p and "stall" in faults
            ):
                verdict = "stall"
        if verdict:
            self.report.faults[verdict] += 1
            if verdict == "stall":
                task.proc.data["stall_s"] = LEASE_S * (1.2 + rng.random())
        return verdict

    # -- processes ---------------------------------------------------------------------------

    def engine(self, proc: Proc) -> durably.Engine:
        """A process's engine: its own store (connection) on the journal, its own owner."""
        self.npid += 1
        caller = proc.data.get("role") == "caller"
        eng = durably.Engine(
            self.url,
            clock=self.clock,
            lease_s=LEASE_S,
            store_retry_s=3.0,
            fault_hook=self._hook,
            # A caller's engine.run waits in-process while its run parks and follows a
            # worker that claimed it first (the waits on the store: the simulated clock).
            wait_for_lease=caller,
            park_wait_s=None if caller else 0.0,
            durability="process",
        )
        opened = eng.store
        store = SimStore(self.url, self.clock, durability="process")
        store.sched = self.sched
        store.world = self.world
        opened.close()
        eng.store = store
        proc.data["store"] = store  # closed when the process is replaced
        keeper = eng._leases.keeper
        keeper._store = store
        keeper.threaded = False  # the simulation beats it (LeaseKeeper.beat)
        pid = 100_000 + self.npid
        owner = Owner(f"sim-{proc.name}", pid, "sim", f"sim{self.npid}:0:0")
        eng._leases._owner = (os.getpid(), owner)
        for w in self.workloads:
            eng.workflow(w.name)(w.fn)
        return eng

    def _hook(self, run_id: str, position: str, name: str, window: str) -> None:
        if window == "recorded":
            self.world.live_steps += 1
        self.world.step_names[(run_id, position)] = name
        self.sched.point("step", f"{run_id}@{position} {name} {window}")

    def start_worker(self, name: str) -> Proc:
        proc = Proc(name, data={"role": "worker"})
        self.procs.append(proc)
        eng = self.engine(proc)
        keeper = eng._leases.keeper

        def loop() -> None:
            while True:
                try:
                    run = eng.claim_next(["default"])
                except DurablyError:
                    self.sched.sleep(1.0)
                    continue
                if run is None:
                    if self.draining and self._all_done() and self._callers_done():
                        return
                    self.sched.sleep(POLL_S)
                    continue
                try:
                    eng.execute_claimed(run)
                except (DurablyError, durably.Cancelled):
                    pass
                except SimKill:
                    raise
                except Exception as exc:  # the finding is the traceback
                    tb = "".join(traceback.format_exception(exc)).strip().splitlines()
                    self.world.violate("unexpected-exception", run.run_id, " | ".join(tb[-4:]))

        def beat() -> None:
            while True:
                self.sched.sleep(LEASE_S / 3)
                if not keeper.cores():
                    if self.draining and self._all_done():
                        return
                    continue
                keeper.beat()

        self.sched.spawn(proc, f"{name}", loop)
        self.sched.spawn(proc, f"{name}.keeper", beat)
        return proc

    def start_caller(self, name: str) -> Proc:
        proc = Proc(name, data={"role": "caller"})
        self.procs.append(proc)
        eng = self.engine(proc)
        rng = self.sched.rng

        def loop() -> None:
            while True:
                self.sched.sleep(rng.expovariate(4.0))
                if self.draining:
                    if self._all_done():
                        return
                    self._answer(eng)
                    continue
                try:
                    self._act(eng, rng)
                except (DurablyError, durably.Cancelled):
                    pass  # an answer of the engine the caller accepts (refused, finished...)

        self.sched.spawn(proc, name, loop)
        return proc

    def _live_plans(self) -> list[RunPlan]:
        """The runs started and not settled (one query; a plan whose run was never
        created, its start having failed, counts as live until it is settled here)."""
        marks = ",".join("?" * len(SETTLED))
        live = {
            r[0]
            for r in self.world.db.execute(
                f"SELECT run_id FROM runs WHERE status NOT IN ({marks})", SETTLED
            )
        }
        return [p for p in self.plans.values() if p.run_id in live]

    def status(self, run_id: str) -> str | None:
        row = self.world.db.execute(
            "SELECT status FROM runs WHERE run_id = ?", (run_id,)
        ).fetchone()
        return None if row is None else str(row[0])

    def _callers_done(self) -> bool:
        # A caller's call retried into the drain may still start (or fork) a run.
        return all(
            t.glet.dead for p in self.procs if p.data.get("role") == "caller" for t in p.tasks
        )

    def _all_done(self) -> bool:
        # A run whose start never committed (its caller saw the failure) is no run.
        marks = ",".join("?" * len(SETTLED))
        row = self.world.db.execute(
            f"SELECT count(*) FROM runs WHERE status NOT IN ({marks})", SETTLED
        ).fetchone()
        return not row[0]

    def _act(self, eng: durably.Engine, rng: Any) -> None:
        hot = self.world.hot
        if hot and rng.random() < 0.7:
            run_id = sorted(hot)[rng.randrange(len(hot))]
            name = hot.pop(run_id)
            fact = self.world.fact(run_id)
            fact.signals_sent += 1
            eng.signal(run_id, name, f"{run_id}:{fact.signals_sent}")
            return
        live = self._live_plans()
        r = rng.random()
        if len(live) < self.cfg.runs_in_flight and r < 0.45:
            w = self._pick(rng)
            self.nrun += 1
            run_id = f"r{self.nrun}"
            args = w.draw(rng)
            self.plans[run_id] = RunPlan(run_id, w, args)  # before: a lost reply may create it
            if w.name in IN_PROCESS and rng.random() < 0.25:
                # engine.run in this process: it drives the run itself, or follows the
                # worker that claimed it first, and must return what an uncrashed run does.
                got = eng.run(w.name, *args, run_id=run_id)
                want = w.expect(*args) if w.expect is not None else got
                if got != want and not self.world.fact(run_id).cancel_asked:
                    self.world.violate(
                        "in-process-result", run_id, f"engine.run gave {got!r}, not {want!r}"
                    )
                return
            eng.start(w.name, *args, run_id=run_id)
            return
        if not live:
            return
        plan = live[rng.randrange(len(live))]
        run_id = plan.run_id
        r = rng.random()
        if r < 0.45:
            if plan.workload.signals:
                fact = self.world.fact(run_id)
                fact.signals_sent += 1
                eng.signal(run_id, plan.workload.signals[0], f"{run_id}:{fact.signals_sent}")
        elif r < 0.85:
            if plan.workload.approvals:
                self._decide_one(eng, rng, run_id)
        elif r < 0.9:
            self.world.fact(run_id).cancel_asked = True
            eng.cancel(run_id, "sim")
        elif r < 0.99:
            self._fork(eng, rng)
        else:
            self._prune(eng)

    def _pick(self, rng: Any) -> Workload:
        pool = [w for w in self.workloads for _ in range(w.weight)]
        chosen: Workload = pool[rng.randrange(len(pool))]
        return chosen

    def _decide_one(self, eng: durably.Engine, rng: Any, run_id: str) -> None:
        pending = eng.pending_approvals(run_id)
        if not pending:
            return
        p = pending[0]
        wrong = rng.random() < 0.15
        digest = ("0" * 64) if wrong else p.digest
        approve = rng.random() < 0.6
        fact = self.world.fact(run_id)
        try:
            if approve:
                d = eng.approve(run_id, p.request_id, digest=digest, by="sim")
            else:
                d = eng.reject(run_id, p.request_id, digest=digest, by="sim")
        except StoreError:
            if not wrong:
                fact.maybe_decided.add(p.request_id)
            raise
        if wrong:
            self.world.violate(
                "decision-wrong-digest", run_id, f"a wrong digest decided {p.request_id}"
            )
            return
        if p.request_id in fact.decided and fact.decided[p.request_id] != d.outcome:
            self.world.violate(
                "decision-twice",
                run_id,
                f"{p.request_id} decided {fact.decided[p.request_id]} then {d.outcome}",
            )
        fact.decided[p.request_id] = d.outcome

    def _fork(self, eng: durably.Engine, rng: Any) -> None:
        completed = {
            r[0]
            for r in self.world.db.execute(
                "SELECT run_id FROM runs WHERE status = 'completed' AND workflow = 'chain'"
            )
        }
        done = [
            p
            for p in self.plans.values()
            if p.workload.name == "chain" and p.run_id in completed and p.forked_from is None
        ]
        if not done:
            return
        src = done[rng.randrange(len(done))]
        self.nrun += 1
        new_id = f"r{self.nrun}f"
        self.plans[new_id] = RunPlan(new_id, src.workload, src.args, forked_from=src.run_id)
        eng.fork(src.run_id, at=rng.randint(0, src.args[0] + 1), new_run_id=new_id)

    def _prune(self, eng: durably.Engine) -> None:
        """Retention at any moment: cancelled and failed runs that finished more than 60
        simulated seconds ago
        go; a run that was not finished must never go (checked whatever the reply)."""
        before = self.world.runs_now()
        try:
            # Completed runs stay, for the final check of their results.
            eng.prune(self.sched.now - 60.0, status=("cancelled", "failed"))
        finally:
            self.world.after_prune(before)

    def _answer(self, eng: durably.Engine) -> None:
        """The drain: answer every wait so the runs can end (signals, decisions)."""
        for plan in self._live_plans():
            try:
                if plan.workload.signals:
                    f = self.world.fact(plan.run_id)
                    f.signals_sent += 1
                    eng.signal(
                        plan.run_id, plan.workload.signals[0], f"{plan.run_id}:{f.signals_sent}"
                    )
                if plan.workload.approvals:
                    for p in eng.pending_approvals(plan.run_id):
                        d = eng.approve(plan.run_id, p.request_id, digest=p.digest, by="drain")
                        self.world.fact(plan.run_id).decided[p.request_id] = d.outcome
            except DurablyError:
                pass

    # -- the loop ----------------------------------------------------------------------------

    def steps(self) -> int:
        return self.world.live_steps + self.world.replayed_steps

    def run(self) -> Report:
        cfg = self.cfg
        t0 = time.perf_counter()
        set_world(self.world)
        # The store's retry backoff draws its jitter from the random module: seeded too.
        saved = random.getstate()
        random.seed(cfg.seed)
        # Simulated faults log by the thousand; quiet while simulating, as it was after.
        quiet = logging.getLogger("durably")
        level = quiet.level
        quiet.setLevel(logging.CRITICAL)
        try:
            setup = Proc("setup", data={"role": "setup"})
            self.engine(setup).store.close()  # the schema, before anyone races for it
            for i in range(cfg.workers):
                self.start_worker(f"w{i}")
            for i in range(cfg.callers):
                self.start_caller(f"c{i}")
            drain_until = None
            while True:
                if not self.draining and self.steps() >= cfg.steps:
                    self.draining = True
                    drain_until = self.sched.now + cfg.drain_s
                self._restart_dead()
                try:
                    if not self.sched.step():
                        if not self.restart_at and all(p.alive for p in self.procs):
                            break
                        # Every process is dead at once: time passes until the first
                        # comes back (as a supervisor restarts it).
                        self.sched.now = max(self.sched.now, min(self.restart_at.values()))
                        continue
                except Deadlock:
                    break
                for task, exc in self.sched.escaped:
                    tb = "".join(traceback.format_exception(exc)).strip().splitlines()
                    self.world.violate(
                        "escaped", task.name, f"{type(exc).__name__}: " + " | ".join(tb[-6:])
                    )
                self.sched.escaped.clear()
                if self.world.violations:
                    break
                if drain_until is not None and self.sched.now > drain_until:
                    break
            if not self.world.violations:
                self._final()
        finally:
            self.sched.stop_all()
            set_world(None)
            random.setstate(saved)
            quiet.setLevel(level)
            self.world.close()
            shutil.rmtree(self.dir, ignore_errors=True)
        rep = self.report
        rep.live_steps, rep.replayed_steps = self.world.live_steps, self.world.replayed_steps
        rep.steps = rep.live_steps + rep.replayed_steps
        rep.actions = self.sched.actions
        rep.runs = len(self.plans)
        rep.violations = list(self.world.violations)
        rep.trace = self.sched.trace_lines()
        rep.sim_seconds = self.sched.now - 1_700_000_000.0
        rep.wall_s = time.perf_counter() - t0
        return rep

    def _restart_dead(self) -> None:
        if all(p.alive for p in self.procs):
            return
        for proc in list(self.procs):
            if proc.alive or any(not t.glet.dead for t in proc.tasks):
                continue
            when = self.restart_at.get(proc.name)
            if when is None:
                self.restart_at[proc.name] = self.sched.now + 0.5 + self.sched.rng.random() * 2
                continue
            if self.sched.now < when and not self.draining:
                continue
            self.procs.remove(proc)
            del self.restart_at[proc.name]
            store = proc.data.get("store")
            if store is not None:
                store.close()
            role = proc.data["role"]
            if role == "worker":
                self.start_worker(proc.name)
            elif role == "caller":
                self.start_caller(proc.name)

    # -- the end ---------------------------------------------------------------------------

    def _final(self) -> None:
        """Every run ended with the result an uncrashed run gives, or is still resumable
        with a reason ``durably.explain`` states."""
        w = self.world
        eng = durably.Engine(self.url, clock=self.clock, lease_s=LEASE_S)
        try:
            for plan in self.plans.values():
                run = eng.store.get_run(plan.run_id)
                if run is None:
                    # Its start failed before the commit (never made), or it finished
                    # and was pruned (world.after_prune checked it had finished).
                    continue
                self.report.outcomes[run.status] += 1
                if run.status not in TERMINAL:
                    why = durably.explain(eng, plan.run_id)
                    self.report.unfinished.append(
                        f"{plan.run_id} ({plan.workload.name}) {run.status}: {why.sentence}"
                    )
                    if not why.sentence:
                        w.violate("lost-run", plan.run_id, f"{run.status} and no reason stated")
                    continue
                self._check_end(eng, plan, run)
        finally:
            eng.close()

    def _check_end(self, eng: durably.Engine, plan: RunPlan, run: Any) -> None:
        w, run_id = self.world, plan.run_id
        fact = w.fact(run_id)
        if run.status == "cancelled":
            if not fact.cancel_asked and plan.workload.approvals is False:
                w.violate("cancelled-unasked", run_id, "ended cancelled with no cancel asked")
            return
        if run.status == "failed":
            if not plan.workload.may_fail:
                w.violate("failed-run", run_id, f"{run.error_type}: {run.error_message}")
            return
        if run.status != "completed":
            return
        result: Any = codec.loads(run.outcome) if run.outcome is not None else None
        wl = plan.workload
        if wl.expect is not None:
            want = wl.expect(*plan.args)
            if result != want:
                w.violate(
                    "wrong-result", run_id, f"got {result!r}, an uncrashed run gives {want!r}"
                )
        if wl.signals:
            rows = w.db.execute(
                "SELECT seq, data, consumed_by FROM signals WHERE run_id = ?"
                " AND consumed_by IS NOT NULL ORDER BY seq",
                (run_id,),
            ).fetchall()
            consumed = [codec.loads(d) for _, d, _ in rows]
            got = [x for x in result if x is not None]
            if got != consumed:
                w.violate(
                    "signals-result",
                    run_id,
                    f"result {got!r} but the journal consumed {consumed!r}",
                )
        if wl.approvals:
            row = w.db.execute(
                "SELECT request_id, outcome FROM approvals WHERE run_id = ?", (run_id,)
            ).fetchall()
            for req, outcome in row:
                acked = fact.decided.get(req)
                if acked is not None and acked != outcome:
                    w.violate(
                        "decision-lost", run_id, f"{req} acknowledged {acked}, stored {outcome}"
                    )
                if outcome != result["outcome"]:
                    w.violate("decision-result", run_id, f"{req} stored {outcome}, result {result}")
                if outcome == "expired" and acked is not None:
                    w.violate("decision-lost", run_id, f"{req} acknowledged {acked} but expired")
        self._check_spend(plan)

    def _check_spend(self, plan: RunPlan) -> None:
        w = self.world
        rows = w.db.execute(
            "SELECT position, fencing_token, attempt, count(*), sum(tokens) FROM spend"
            " WHERE run_id = ? GROUP BY position, fencing_token, attempt",
            (plan.run_id,),
        ).fetchall()
        for pos, token, attempt, n, tokens in rows:
            reported = w.spend.get((plan.run_id, pos, token, attempt))
            if n != 1 or reported is None or tokens != reported:
                w.violate(
                    "spend-not-once",
                    plan.run_id,
                    f"position {pos} token {token} attempt {attempt}: {n} ledger rows, {tokens}"
                    f" tokens; the attempt reported {reported}",
                )


def simulate(cfg: Config) -> Report:
    """Run one simulation (a failure found without the trace is run again with it: the
    same seed gives the same interleaving)."""
    rep = Simulation(cfg).run()
    if rep.violations and not cfg.trace:
        rep = Simulation(replace(cfg, trace=True)).run()
    return rep


def shrink(cfg: Config, found: Report, budget_runs: int = 12) -> tuple[Config, Report]:
    """A smaller configuration that still fails (the same invariant): fewer steps, fewer
    workers and callers, fewer kinds of fault, tried one at a time."""
    want = found.violations[0].invariant
    best, best_rep = cfg, found
    tries = 0

    def fails(c: Config) -> Report | None:
        nonlocal tries
        tries += 1
        rep = simulate(c)
        return rep if rep.violations and rep.violations[0].invariant == want else None

    candidates = []
    for steps in (best.steps // 8, best.steps // 4, best.steps // 2):
        if steps >= 20:
            candidates.append(("steps", steps))
    for _, value in candidates:
        if tries >= budget_runs:
            break
        trial = replace(best, steps=value)
        rep = fails(trial)
        if rep is not None:
            best, best_rep = trial, rep
            break
    for n in range(1, best.workers):
        if tries >= budget_runs:
            break
        rep = fails(replace(best, workers=n))
        if rep is not None:
            best, best_rep = replace(best, workers=n), rep
            break
    for kind in best.faults:
        if tries >= budget_runs:
            break
        trial = replace(best, faults=tuple(k for k in best.faults if k != kind))
        rep = fails(trial)
        if rep is not None:
            best, best_rep = trial, rep
    return best, best_rep
