"""The world outside the journal, owned by the simulation: what the steps did to it.

Step functions of the workloads call into the :class:`World` (the payment service, the
mailbox): it counts every execution and applies keyed effects once per key (as a real
service deduplicating on an idempotency key), and checks, at the moment each happens,
what the journal says about it through a checker connection of its own (a plain read,
no turn of the scheduler). Violations are collected; the simulation stops at the first.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ...current import current_step
from ...history import position_key
from .sched import Scheduler, SimKill


@dataclass
class Violation:
    """One broken invariant: which, of which run, and what was seen."""

    invariant: str
    run_id: str
    detail: str
    at_action: int = 0

    def line(self) -> str:
        return f"VIOLATION {self.invariant} run={self.run_id}: {self.detail}"


@dataclass
class Facts:
    """What outside callers did to one run (the world's side of it)."""

    cancel_asked: bool = False
    decided: dict[str, str] = field(default_factory=dict)  # request_id -> outcome acked
    maybe_decided: set[str] = field(default_factory=set)  # a decide whose reply was lost
    signals_sent: int = 0


class World:
    """Effects, executions and the per-action invariant checks."""

    def __init__(self, sched: Scheduler, path: str) -> None:
        self.sched = sched
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.violations: list[Violation] = []
        self.applied: dict[str, tuple[str, str]] = {}  # key -> (run_id, position)
        self.effect_calls: Counter[str] = Counter()
        self.executions: Counter[tuple[str, str]] = Counter()
        self.spend: dict[tuple[str, str, int, int], int] = {}  # (run, pos, token, attempt)
        self.claims: dict[tuple[str, int], int] = {}  # (run, token) -> action of the claim
        self.cancels: dict[str, int] = {}  # run -> action whose commit asked the cancel
        self.facts: dict[str, Facts] = {}
        self.taken: dict[tuple[str, str], tuple[int, str]] = {}  # (run, consumer) -> seq, name
        self.step_names: dict[tuple[str, str], str] = {}  # from the fault hook
        self.hot: dict[str, str] = {}  # runs whose wait just found no signal, its name
        self.live_steps = 0
        self.replayed_steps = 0

    def order(self, n: int) -> list[int]:
        """``range(n)`` in an order drawn from the simulation's seed (the order in which
        threads would enter a workflow's branches)."""
        out = list(range(n))
        self.sched.rng.shuffle(out)
        return out

    def fact(self, run_id: str) -> Facts:
        f = self.facts.get(run_id)
        if f is None:
            f = self.facts[run_id] = Facts()
        return f

    def violate(self, invariant: str, run_id: str, detail: str) -> None:
        self.violations.append(Violation(invariant, run_id, detail, self.sched.actions))

    def _alive(self) -> None:
        task = self.sched.current
        if task is not None and not task.proc.alive:
            raise SimKill(task.proc.name)  # a dead process reaches nothing outside

    # -- called by step functions ---------------------------------------------------------

    def execute(self) -> tuple[str, str, int, int]:
        """A step function starts: check it is not recorded already and that no cancel's
        halt came before its claim. Returns (run_id, position, token, attempt)."""
        self._alive()
        info = current_step()
        assert info is not None, "a world call outside a step"
        run_id = info.run_id
        row = self.db.execute(
            "SELECT s.status, r.status, r.cancel_requested_at, r.generation FROM runs r"
            " LEFT JOIN steps s ON s.run_id = r.run_id AND s.generation = r.generation"
            " AND s.position = ? WHERE r.run_id = ?",
            (info.position, run_id),
        ).fetchone()
        # Positions start again at 0 in each generation (continue_as_new): the world names
        # a step as the fault hook does, g{N}.{position} for N >= 1.
        gen = row[3] if row is not None else 0
        pos = info.position if not gen else f"g{gen}.{info.position}"
        self.executions[(run_id, pos)] += 1
        if row is not None:
            step_status, run_status, _, _ = row
            cancel_at = self.cancels.get(run_id)
            if step_status == "ok":
                self.violate("recorded-step-re-executed", run_id, f"position {pos} ran again")
            if run_status in ("completed", "failed", "cancelled"):
                self.violate("step-after-end", run_id, f"position {pos} ran on a {run_status} run")
            claimed = self.claims.get((run_id, info.fencing_token))
            name = self._step_name(run_id, pos)
            if (
                cancel_at is not None
                and claimed is not None
                and cancel_at < claimed
                and not name.startswith("undo:")  # a saga's compensation runs on a cancel
                and step_status != "intent"  # an effect in flight completes under its key
            ):
                self.violate(
                    "live-step-after-cancel",
                    run_id,
                    f"position {pos} went live in a claim (token {info.fencing_token}) made"
                    " after the cancel was asked",
                )
        return run_id, pos, info.fencing_token, info.attempt

    def _step_name(self, run_id: str, pos: str) -> str:
        return self.step_names.get((run_id, pos), "")

    def apply(self, key: str, what: Any) -> str:
        """A keyed effect (a payment, an email): applied once per key, as a service that
        deduplicates on the key; the same position applied under two keys is a
        duplicate effect."""
        run_id, pos, _, _ = self.execute()
        self.effect_calls[key] += 1
        seen = self.applied.get(key)
        if seen is None:
            for k, (r, p) in self.applied.items():
                if r == run_id and p == pos:
                    self.violate(
                        "keyed-effect-twice", run_id, f"position {pos} applied under {k} and {key}"
                    )
                    break
            self.applied[key] = (run_id, pos)
        elif seen != (run_id, pos):
            # Keys never repeat (across generations too): a receiver would take the second
            # effect for a retry of the first and never do it.
            self.violate("key-reused", run_id, f"{key} given to {seen[0]}@{seen[1]} and {pos}")
        return f"applied:{what}"

    def charged(self, tokens: int) -> None:
        """A step reported ``tokens`` of spend for its attempt."""
        info = current_step()
        assert info is not None
        self.spend[(info.run_id, info.position, info.fencing_token, info.attempt)] = tokens

    # -- called by the store, right after a commit the caller saw --------------------------

    def after_append(self, run_id: str, token: int) -> None:
        now_token = self.db.execute(
            "SELECT fencing_token FROM runs WHERE run_id = ?", (run_id,)
        ).fetchone()
        if now_token is not None and now_token[0] != token:
            self.violate(
                "stale-token-append",
                run_id,
                f"append by token {token} accepted; run has {now_token[0]}",
            )

    def after_claim(self, run_id: str, token: int) -> None:
        self.claims[(run_id, token)] = self.sched.actions

    def after_cancel(self, run_id: str) -> None:
        if run_id in self.cancels:
            return
        row = self.db.execute(
            "SELECT cancel_requested_at FROM runs WHERE run_id = ?", (run_id,)
        ).fetchone()
        if row is not None and row[0] is not None:
            self.cancels[run_id] = self.sched.actions

    def after_take(
        self, run_id: str, name: str, consumer: str, got: tuple[int, str] | None
    ) -> None:
        rows = self.db.execute(
            "SELECT seq, consumed_by FROM signals WHERE run_id = ? AND consumed_by IS NOT NULL",
            (run_id,),
        ).fetchall()
        mine = [seq for seq, by in rows if by == consumer]
        if len(mine) > 1:
            self.violate(
                "signal-consumed-twice", run_id, f"consumer {consumer} holds signals {sorted(mine)}"
            )
        if got is None:
            return
        before = self.taken.get((run_id, consumer))
        if before is not None and before[0] != got[0]:
            self.violate(
                "signal-handed-differently",
                run_id,
                f"the wait at {consumer} was handed #{before[0]}, then #{got[0]}",
            )
        self.taken[(run_id, consumer)] = (got[0], name)
        # In order per name: a later wait (in program order) holds a later signal.
        here = position_key(consumer)
        for (r, other), (seq, other_name) in self.taken.items():
            if r != run_id or other == consumer or other_name != name:
                continue
            if (here < position_key(other)) != (got[0] < seq):
                self.violate(
                    "signal-order",
                    run_id,
                    f"the wait at {consumer} got #{got[0]} but the wait at {other} got #{seq}",
                )

    def found_waiting(self, run_id: str, name: str) -> None:
        """A wait found no signal and is about to park: an outside caller may be woken
        to send one right now (between the look and the park), the moment a park that
        misses a signal committed just before it would show."""
        self.hot[run_id] = name
        if self.sched.rng.random() < 0.5:
            for t in self.sched.tasks:
                if t.proc.data.get("role") == "caller":
                    t.wake_at = min(t.wake_at, self.sched.now)

    def runs_now(self) -> dict[str, str]:
        """Every run's status now (before a prune)."""
        return dict(self.db.execute("SELECT run_id, status FROM runs").fetchall())

    def after_prune(self, before: dict[str, str]) -> None:
        """No run that had not finished before a prune is gone after it (one that
        finished meanwhile finished after the prune's cutoff, so it stays too)."""
        have = {r[0] for r in self.db.execute("SELECT run_id FROM runs")}
        for run_id, status in before.items():
            if run_id not in have and status not in ("completed", "failed", "cancelled"):
                self.violate("pruned-unfinished", run_id, f"a prune removed a {status} run")

    def check_wake(self, run_id: str) -> None:
        """A run parked waiting for a signal that is already there must be due now (the
        park must see a signal committed a moment before it; a send must wake the run
        parked on it)."""
        row = self.db.execute(
            "SELECT status, wait_signal, wake_at FROM runs WHERE run_id = ?", (run_id,)
        ).fetchone()
        if row is None or row[0] != "parked" or row[1] is None:
            return
        names = json.loads(row[1])
        marks = ",".join("?" * len(names))
        waiting = self.db.execute(
            f"SELECT min(seq) FROM signals WHERE run_id = ? AND consumed_by IS NULL"
            f" AND name IN ({marks})",
            (run_id, *names),
        ).fetchone()[0]
        if waiting is not None and (row[2] is None or row[2] > self.sched.now):
            self.violate(
                "park-missed-signal",
                run_id,
                f"parked waiting for {names} (wake at {row[2]}) with signal #{waiting} there",
            )

    def check_decision(self, run_id: str, request_id: str) -> None:
        """A decision a person was told was taken is the one stored (an expiry taken
        later never replaces it)."""
        acked = self.fact(run_id).decided.get(request_id)
        if acked is None:
            return
        row = self.db.execute(
            "SELECT outcome FROM approvals WHERE run_id = ? AND request_id = ?",
            (run_id, request_id),
        ).fetchone()
        if row is not None and row[0] != acked:
            self.violate(
                "decision-lost", run_id, f"{request_id} acknowledged {acked}, stored {row[0]}"
            )

    def close(self) -> None:
        self.db.close()
