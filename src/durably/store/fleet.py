"""The fleet role, written once: the workers table (over the :mod:`.tx` protocol). Owner
liveness (the owner-lock session) is each backend's own."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .base import Owner
from .tx import Backend, Tx

WORKERS_MAX = 10_000
"""Most live workers one ``live_workers`` call returns."""

WORKER_ROWS_KEPT_S = 86_400.0
"""How long a dead worker's row stays (for people reading the table) before a beat
prunes it."""


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


def worker_params(owner: object, queues: Sequence[str], now: float, ttl_s: float) -> dict[str, Any]:
    """The parameters of ``beat_worker``: the queues as a JSON array."""
    import json

    return {
        "owner": str(owner),
        "queues": json.dumps(list(queues)),
        "now": now,
        "expires_at": now + ttl_s,
        "before": now - WORKER_ROWS_KEPT_S,
    }


def worker_rows(rows: Sequence[Sequence[Any]]) -> list[tuple[str, tuple[str, ...]]]:
    """``(owner, queues)`` of rows read from ``workers``; a crafted row's queues that are
    not a JSON array of strings count as none (the row is shown, never trusted)."""
    import json

    out = []
    for owner, text in rows:
        try:
            queues = json.loads(text) if isinstance(text, str) else None
        except (ValueError, RecursionError):
            queues = None
        ok = isinstance(queues, list) and all(isinstance(q, str) for q in queues)
        out.append((str(owner), tuple(queues) if ok and queues is not None else ()))
    return out
