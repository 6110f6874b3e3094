"""The worker loop in-process: queue limits, version routing and stopping."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

import pytest

import durably
from durably.worker import Worker


def test_queue_limits_per_worker_and_fleet(tmp_path: Path) -> None:
    engine = durably.Engine(f"sqlite:///{tmp_path / 'j.db'}")
    engine.queue("mail", worker_concurrency=1)
    engine.queue("sms", concurrency=2)
    lock = threading.Lock()
    running: Counter[str] = Counter()
    peak: Counter[str] = Counter()

    def work(queue: str) -> None:
        with lock:
            running[queue] += 1
            peak[queue] = max(peak[queue], running[queue])
        time.sleep(0.15)
        with lock:
            running[queue] -= 1

    @engine.workflow(name="w")
    def w(ctx: durably.Context, queue: str, i: int) -> int:
        ctx.step("work", work, queue)
        return i

    handles = [
        engine.start(w, q, i, run_id=f"{q}-{i}", queue=q)
        for q in ("mail", "sms", "default")
        for i in range(4)
    ]
    worker = Worker(engine, concurrency=8, queues=("default", "mail", "sms"), poll_interval_s=0.01)
    t = threading.Thread(target=worker.run)
    t.start()
    try:
        assert [h.result(timeout_s=30) for h in handles] == [0, 1, 2, 3] * 3
    finally:
        worker.stop()
        t.join(10)
    assert peak["mail"] == 1 and peak["sms"] == 2 and peak["default"] >= 2
    assert worker.stats.completed == 12
    engine.close()


def test_versions_route_only_when_set(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    old, new = durably.Engine(url), durably.Engine(url)

    @old.workflow(name="agent", version="1")
    def agent_v1(ctx: durably.Context) -> str:
        return "v1"

    @new.workflow(name="agent", version="2")
    def agent_v2(ctx: durably.Context) -> str:
        return "v2"

    h1 = old.start(agent_v1, run_id="started-on-v1")
    h2 = new.start(agent_v2, run_id="started-on-v2")
    worker = Worker(new, concurrency=2, poll_interval_s=0.01)
    assert worker.run(max_runs=1).completed == 1
    assert h2.result(timeout_s=5) == "v2" and h1.status() == "queued"
    with pytest.raises(TimeoutError, match="is a worker running"):
        h1.result(timeout_s=0.1)
    assert Worker(old, poll_interval_s=0.01).run(max_runs=1).completed == 1
    assert h1.result(timeout_s=5) == "v1"
    old.close()
    new.close()


def test_start_is_idempotent_per_run_id(tmp_path: Path) -> None:
    engine = durably.Engine(f"sqlite:///{tmp_path / 'j.db'}")

    @engine.workflow(name="w")
    def w(ctx: durably.Context, x: int) -> int:
        return x

    a = engine.start(w, 1, run_id="once")
    b = engine.start(w, 1, run_id="once")
    assert a.run_id == b.run_id == "once" and len(engine.store.list_runs()) == 1
    with pytest.raises(durably.RunConflict):
        engine.start(w, 2, run_id="once")
    with pytest.raises(durably.ConfigError):
        engine.start(w, 1, queue="")
    with pytest.raises(durably.ConfigError):
        Worker(engine, concurrency=0)
    engine.close()


def test_a_resume_after_a_park_is_not_logged_as_a_takeover(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with durably.Engine(f"sqlite:///{tmp_path / 'j.db'}") as engine:

        @engine.workflow(name="nap")
        def nap(ctx: durably.Context) -> str:
            ctx.sleep(0.05)
            return "up"

        handle = engine.start(nap, run_id="n")
        worker = Worker(engine, concurrency=1, poll_interval_s=0.01)
        with caplog.at_level("INFO", logger="durably"):
            worker.run(max_runs=2)  # the first start parks, the second resumes when due
            assert handle.result(timeout_s=30) == "up"
    claims = [r.getMessage() for r in caplog.records if "claimed run n" in r.getMessage()]
    assert len(claims) == 2 and "start 2, resuming from its journal" in claims[1]
    assert not any("taking over" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("journal_url", ["sqlite", "postgres"], indirect=True)
def test_an_idle_worker_with_a_long_poll_stops_at_once(journal_url: str) -> None:
    """stop() (SIGTERM) is seen within a fraction of a second, not after the poll: one
    long wait for work (LISTEN on PostgreSQL) kept it idle for the whole 30 s."""
    with durably.Engine(journal_url) as engine:
        engine.workflow(name="w")(lambda ctx: None)
        worker = Worker(engine, concurrency=1, poll_interval_s=30)
        thread = threading.Thread(target=worker.run)
        thread.start()
        time.sleep(0.5)  # idle in its wait for work
        worker.stop()
        thread.join(10)
        assert not thread.is_alive(), "the worker went on waiting for its 30 s poll"
