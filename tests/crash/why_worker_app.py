"""The engine a real ``durably worker why_worker_app:engine`` serves in the ``runs why``
tests (journal from ``DURABLY_URL``): it serves ``noop`` only, so a run of another
workflow stays queued in front of it."""

from __future__ import annotations

import durably

engine = durably.Engine()


@engine.workflow(name="noop")
def noop(ctx: durably.Context) -> int:
    """Nothing to do."""
    return 1
