"""The events role, written once: reading a run's event stream (over the :mod:`.tx`
protocol). Writing events is :meth:`Tx.events`; waiting for them is each backend's own
(SQLite polls, PostgreSQL LISTENs)."""

from __future__ import annotations

from typing import Any

from ..events import EventPage
from . import stream
from .tx import Backend, Tx


class Events(Backend):
    """Store methods of the events role (see :class:`~durably.store.base.Store`)."""

    def read_events(self, run_id: str, after: int, limit: int) -> EventPage | None:
        """Events after ``after`` (see the Store protocol); None for an unknown run."""
        params = {"run_id": run_id, "after": after, "limit": limit}

        def op(tx: Tx) -> tuple[Any, list[Any]]:
            # The status first: events are read after it, so a terminal status means the
            # page holds every event (a run's events commit in cursor order).
            status = tx.scalar("run_status", **params)
            if status is None:
                return None, []
            return str(status), tx.q("read_events", **params).fetchall()

        status, rows = self._reading(op, snapshot=True)
        return None if status is None else stream.page(run_id, status, rows, after, limit)
