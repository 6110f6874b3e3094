"""A worker of an engine with ``retain_finished=`` prunes finished runs in its loop."""

from __future__ import annotations

import datetime as dt
import threading
import time
from pathlib import Path

import durably
from durably.clock import FakeClock
from durably.worker import Worker


def test_a_worker_applies_retain_finished(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    clock = FakeClock()
    with durably.Engine(url, clock=clock, retain_finished=dt.timedelta(hours=1)) as engine:

        @engine.workflow(name="w")
        def w(ctx: durably.Context) -> str:
            return "done"

        engine.run(w, run_id="old")
        clock.advance(7200)
        engine.run(w, run_id="new")
        worker = Worker(engine, poll_interval_s=0.05)
        thread = threading.Thread(target=worker.run)
        thread.start()
        try:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and worker.stats.other["pruned"] == 0:
                time.sleep(0.01)
        finally:
            worker.stop()
            thread.join(10)
        assert worker.stats.other["pruned"] == 1
        assert [r.run_id for r in engine.list_runs().runs] == ["new"]
        assert [t.run_id for t in engine.list_tombstones()] == ["old"]
