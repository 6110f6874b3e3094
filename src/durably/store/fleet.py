"""The fleet role, written once: the workers table (over the :mod:`.tx` protocol). Owner
liveness (the owner-lock session) is each backend's own."""

from __future__ import annotations

from collections.abc import Sequence

from .base import Owner
from .rules import WORKERS_MAX, worker_params, worker_rows
from .tx import Backend, Tx


class Fleet(Backend):
    """Store methods of the fleet role (see :class:`~durably.store.base.Store`)."""

    def beat_worker(self, owner: Owner, queues: Sequence[str], ttl_s: float) -> None:
        """Upsert this worker's row (see the Store protocol)."""
        params = worker_params(owner, queues, self.clock.time(), ttl_s)

        def op(tx: Tx) -> None:
            tx.q("prune_workers", **params)
            tx.q("beat_worker", **params)

        self._writing(op)

    def drop_worker(self, owner: Owner) -> None:
        """Remove this worker's row."""
        self._writing(lambda tx: tx.q("drop_worker", owner=str(owner)), atomic=False)

    def live_workers(self) -> list[tuple[str, tuple[str, ...]]]:
        """Workers whose last beat has not expired."""
        now = self.clock.time()
        rows = self._reading(lambda tx: tx.q("live_workers", now=now, limit=WORKERS_MAX).fetchall())
        return worker_rows(rows)
