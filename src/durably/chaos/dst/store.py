"""The real SQLite store, with the scheduler's turn and its faults at every transaction.

:class:`SimStore` is :class:`~durably.store.sqlite.SQLiteStore` itself (the real named
queries, the real role modules over the transaction protocol of :mod:`durably.store.tx`),
with the three ways into the database (``_writing``, ``_reading`` and the step path's
``_append_quick``) first giving the turn to the scheduler. The verdict the scheduler
returns there is the fault: the transaction is refused before it starts (``busy``, a full
disk, a plain transient failure), or it commits and its reply is lost (``lost``: the
caller sees a transient error, as a client whose connection died after COMMIT does), or
the process dies before it (``kill``) or right after its commit (``killafter``). The
waits of the store (``wait_for_work``, ``wait_for_events``) are waits on the simulated
clock. Crashes are simulated, so the file runs with ``synchronous=OFF``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ...errors import StoreBusy, StoreDiskFull, StoreError
from ...events import NewEvent
from ...history import StepRecord
from ...store.sqlite import SQLiteStore
from ...store.tx import Tx
from .sched import Scheduler, SimKill
from .world import World

T = TypeVar("T")


class LostReply(StoreError):
    """The commit went through; the reply never came (a dropped connection)."""

    transient = True


class FailedBefore(StoreError):
    """The transaction failed before its commit (nothing written)."""

    transient = True


def _refuse(verdict: str, where: str) -> None:
    if verdict == "busy":
        raise StoreBusy(f"{where}: simulated busy")
    if verdict == "full":
        raise StoreDiskFull(f"{where}: simulated full disk")
    if verdict == "fail":
        raise FailedBefore(f"{where}: simulated failure before commit")


def _caller() -> str:
    """The store operation (and its run) this transaction belongs to, for the trace."""
    f = sys._getframe(3)
    name = "?"
    while f is not None:
        code = f.f_code
        if code.co_filename.endswith(_ROLES) and code.co_name not in ("_writing", "_reading", "op"):
            run_id = f.f_locals.get("run_id")
            name = code.co_name if run_id is None else f"{code.co_name}({run_id})"
            if not code.co_name.startswith("_"):
                break
        f = f.f_back  # type: ignore[assignment]
    return name


_ROLES = tuple(
    f"store/{m}.py"
    for m in (
        "runs",
        "leases",
        "history",
        "signals",
        "approvals",
        "spend",
        "events",
        "fleet",
        "sqlite",
        "groupcommit",
    )
)


class SimStore(SQLiteStore):
    """A SQLite store whose every transaction is a point of the scheduler."""

    sched: Scheduler
    world: World

    def _configure(self, synchronous: str) -> None:
        super()._configure(synchronous)
        self._conn.execute("PRAGMA synchronous = OFF")  # crashes are simulated

    def _turn(self, what: str, write: bool) -> str:
        if self.sched.tracing:
            what = _caller() + " " + what
        verdict = self.sched.point("tx", what)
        if verdict in ("busy", "full", "fail"):
            _refuse(verdict, self.path)
        if not write and verdict in ("lost", "killafter"):
            return ""  # a read: its reply lost is a failure before, nothing to commit
        return verdict

    def _after(self, verdict: str) -> None:
        if verdict == "lost":
            raise LostReply(f"{self.path}: simulated lost reply after commit")
        if verdict == "killafter":
            self.sched.kill(self.sched.current.proc)  # type: ignore[union-attr]
            raise SimKill("killed after commit")

    def _writing(self, op: Callable[[Tx], T], atomic: bool = True, durable: bool = True) -> T:
        verdict = self._turn("write", True)
        out = super()._writing(op, atomic, durable)
        self._after(verdict)
        return out

    def _reading(self, op: Callable[[Tx], T], snapshot: bool = False) -> T:
        self._turn("read", False)
        return super()._reading(op, snapshot)

    def _append_quick(
        self,
        run_id: str,
        token: int,
        records: Sequence[StepRecord],
        events: Sequence[NewEvent],
        durable: bool = True,
    ) -> bool | None:
        if len(records) != 1 or events or records[0].blobs:
            return None  # the transaction of History.append takes it (its own turn)
        verdict = self._turn("append", True)
        out = super()._append_quick(run_id, token, records, events, durable)
        if out is not None:
            self._after(verdict)
        return out

    def wait_for_work(self, timeout_s: float) -> bool:
        self.sched.sleep(timeout_s)
        return False

    def wait_for_events(self, run_id: str, timeout_s: float) -> None:
        self.sched.sleep(timeout_s)

    # -- what the world checks right after a call it saw succeed --------------------------

    def load_history(self, run_id: str, generation: int) -> list[StepRecord]:
        out = super().load_history(run_id, generation)
        self.world.replayed_steps += len(out)
        return out

    def append(
        self,
        run_id: str,
        token: int,
        records: Sequence[StepRecord],
        events: Sequence[NewEvent] = (),
    ) -> bool:
        out = super().append(run_id, token, records, events)
        self.world.after_append(run_id, token)
        return out

    def claim(self, *args: Any, **kwargs: Any) -> Any:
        run = super().claim(*args, **kwargs)
        self.world.after_claim(run.run_id, run.fencing_token)
        return run

    def claim_next(self, *args: Any, **kwargs: Any) -> Any:
        run = super().claim_next(*args, **kwargs)
        if run is not None:
            self.world.after_claim(run.run_id, run.fencing_token)
        return run

    def take_signal(
        self, run_id: str, token: int, name: str, consumer: str
    ) -> tuple[int, str] | None:
        got = super().take_signal(run_id, token, name, consumer)
        self.world.after_take(run_id, name, consumer, got)
        if got is None:
            self.world.found_waiting(run_id, name)
        return got

    def request_cancel(self, run_id: str, reason: str | None) -> Any:
        try:
            return super().request_cancel(run_id, reason)
        finally:
            self.world.after_cancel(run_id)

    # -- determinism: a run's incarnation (in every key, and so in every retry's jitter)
    # is drawn from os.urandom; here it is a function of the run id.

    def create_run(self, new: Any) -> Any:
        return super().create_run(dataclasses.replace(new, incarnation=_incarnation(new.run_id)))

    def fork_run(self, new: Any, records: Sequence[StepRecord], source: str | None = None) -> Any:
        return super().fork_run(
            dataclasses.replace(new, incarnation=_incarnation(new.run_id)), records, source
        )

    def park(self, run_id: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().park(run_id, *args, **kwargs)
        finally:
            self.world.check_wake(run_id)

    def send_signal(self, run_id: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().send_signal(run_id, *args, **kwargs)
        finally:
            self.world.check_wake(run_id)

    def approval_decision(self, run_id: str, token: int, request_id: str) -> Any:
        try:
            return super().approval_decision(run_id, token, request_id)
        finally:
            self.world.check_decision(run_id, request_id)


def _incarnation(run_id: str) -> str:
    return hashlib.sha256(run_id.encode()).hexdigest()[:12]
