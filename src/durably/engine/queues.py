"""Queues: enqueueing runs for workers, concurrency limits, and the claims of workers
(the next runnable run, a run this process drives given back)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._record import Record, set_field
from ..errors import ConfigError
from ..history import RunRecord, check_text
from ..ownership import check_clock, owner_dead
from .attempt import ActiveRuns
from .base import Base
from .create import Creator
from .leases import Leases
from .registry import Registry, Workflow


class QueueLimits(Record, frozen=True):
    """Concurrency limits of one queue."""

    concurrency: int | None
    worker_concurrency: int | None

    def __init__(
        self, concurrency: int | None = None, worker_concurrency: int | None = None
    ) -> None:
        set_field(self, "concurrency", concurrency)
        set_field(self, "worker_concurrency", worker_concurrency)


class Queues:
    """``engine.start``, ``engine.queue`` and the worker's claims."""

    def __init__(
        self,
        base: Base,
        registry: Registry,
        creator: Creator,
        leases: Leases,
        active: ActiveRuns,
    ) -> None:
        self._base = base
        self._registry = registry
        self._creator = creator
        self._leases = leases
        self._active = active
        self._limits: dict[str, QueueLimits] = {}

    def start(
        self,
        wf: Workflow | str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        run_id: str | None,
        queue: str,
    ) -> tuple[Workflow, RunRecord]:
        """Create (or find) the run on ``queue``, for workers."""
        if not isinstance(queue, str) or not queue:
            raise ConfigError(f"queue must be a non-empty str, got {queue!r}")
        check_text(queue, "queue")
        return self._creator.prepare_resolved(wf, args, kwargs, run_id, queue)

    def set_limits(
        self, name: str, concurrency: int | None, worker_concurrency: int | None
    ) -> None:
        """Limit how many runs of queue ``name`` run at once (fleet, and per worker)."""
        for v in (concurrency, worker_concurrency):
            if v is not None and v < 1:
                raise ConfigError(f"queue {name!r}: concurrency limits must be >= 1")
        self._limits[name] = QueueLimits(concurrency, worker_concurrency)

    def limits(self) -> dict[str, QueueLimits]:
        """The limits set per queue (a copy)."""
        return dict(self._limits)

    def claim_next(self, queues: list[str], skip_queues: frozenset[str]) -> RunRecord | None:
        """Claim the next runnable run of ``queues`` this engine can execute."""
        opts = self._base.opts
        served = self._registry.served()
        limits = {
            q: lim.concurrency for q, lim in self._limits.items() if lim.concurrency is not None
        }
        open_queues = [q for q in queues if q not in skip_queues]
        if not open_queues:
            return None
        return self._base.store.claim_next(
            self._leases.owner_now(),
            opts.lease_s,
            opts.max_starts,
            owner_dead,
            served,
            open_queues,
            limits,
        )

    def wait_for_work(self, timeout_s: float) -> bool:
        """Block until new work may be runnable (True: a notification) or ``timeout_s``
        passed (False)."""
        return self._base.store.wait_for_work(timeout_s)

    def beat_worker(self, queues: Sequence[str]) -> None:
        """Write (or renew) this process's row in the workers table for one lease."""
        store = self._base.store
        store.beat_worker(self._leases.owner_now(), list(queues), self._base.opts.lease_s)

    def drop_worker(self) -> None:
        """Remove this process's row from the workers table."""
        self._base.store.drop_worker(self._leases.owner_now())

    def check_clock(self) -> float | None:
        """Compare this host's clock with the database's (a warning past the bound)."""
        return check_clock(self._base.store, self._base.opts.clock)

    def abandon_active(self) -> list[str]:
        """Give back every run this process is driving; returns their ids."""
        active = self._active.all()
        for att in active:
            att.core.lose_lease()
            att.heartbeat.stop()
            self._leases.give_back(att.run.run_id, att.core.token)
        return [att.run.run_id for att in active]
