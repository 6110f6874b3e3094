"""A worker resumes a run parked on ``ctx.wait_for_signal`` when another engine signals
it: on PostgreSQL through NOTIFY (the worker's poll is set far longer than the wake-up
may take), on SQLite within the worker's poll."""

from __future__ import annotations

import threading
import time
from typing import Any

import durably
from durably.worker import Worker


def _until(check: Any, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_signal_from_another_engine_wakes_a_run_parked_in_a_worker(journal_url: str) -> None:
    pg = journal_url.startswith("postgresql")
    # PostgreSQL must not need the poll: NOTIFY wakes it. The poll is long so that the
    # bound below (the NOTIFY's) has room on a loaded machine; an idle worker stops at once.
    poll_s = 60.0 if pg else 0.2
    engine = durably.Engine(journal_url)

    @engine.workflow(name="approval")
    def approval(ctx: durably.Context, ticket: str) -> Any:
        decision = ctx.wait_for_signal("approve")
        return [ticket, decision, ctx.step("woke", time.time)]

    worker = Worker(engine, concurrency=2, poll_interval_s=poll_s, drain_s=5)
    thread = threading.Thread(target=worker.run)
    thread.start()
    sender = durably.Engine(journal_url)  # another engine: only the journal is shared
    try:
        handle = engine.start(approval, "T-7", run_id="r")
        _until(lambda: engine.get_run("r").status == "parked")
        run = engine.get_run("r")
        assert run.owner is None and run.wake_at is None  # a row: no lease, no timer
        assert run.park_reason is not None
        assert run.park_reason.startswith("signal 'approve' since ")
        assert worker.stats.other["parked"] == 1  # its slot was given back
        time.sleep(0.3)  # the worker is idle in its wait for work now
        sent = time.time()
        assert sender.signal("r", "approve", {"by": "ana"}) == 1
        ticket, decision, woke = handle.result(timeout_s=poll_s if pg else 30)
        assert (ticket, decision) == ("T-7", {"by": "ana"})
        # PostgreSQL: the NOTIFY in the signal's transaction, not the 60 s poll.
        assert woke - sent < (20.0 if pg else poll_s + 20.0)
    finally:
        worker.stop()
        thread.join(30)
        sender.close()
        engine.close()
