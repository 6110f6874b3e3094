"""A run driven in a background thread of the test process, held open by a gate."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import durably


@contextmanager
def running(
    engine: durably.Engine, wf: durably.Workflow, run_id: str, gate: threading.Event
) -> Iterator[threading.Thread]:
    """``engine.run(wf, run_id=run_id)`` in a thread for the ``with`` block; on leaving it
    ``gate`` is set (so a step waiting on it returns) and the thread joined."""
    outcome: dict[str, Any] = {}

    def drive() -> None:
        try:
            outcome["value"] = engine.run(wf, run_id=run_id)
        except BaseException as exc:  # reported by the test's own assertions, not lost
            outcome["error"] = exc

    thread = threading.Thread(target=drive, name=f"run-{run_id}")
    thread.start()
    try:
        yield thread
    finally:
        gate.set()
        thread.join(60)
