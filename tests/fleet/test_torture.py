"""Torture: several real worker processes drive runs while the test SIGKILLs them, stops
them past their lease (SIGSTOP, then SIGCONT), and on PostgreSQL terminates random
durably sessions (``pg_terminate_backend``) and cuts every connection at once in a TCP
proxy between the workers and the server (mid-query, mid-COMMIT, mid-reply). Effects and
every step execution are counted in a separate database (the world). After the chaos
stops, every run must end completed, or parked in doubt at its unkeyed effect, and never:

- a keyed effect applied under two keys (a duplicate the receiver cannot dedupe),
- an unkeyed effect executed twice,
- a step executed again after its record was written,
- a run ``failed`` or ``blocked`` (infrastructure trouble is never the workflow's).

Bounded by default (``make test``); ``DURABLY_TORTURE_S=600`` runs the chaos longer.
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import pytest
import torture_app
from fleet_support import HERE, Forwarder, wait_until

import durably

# 8 s in the suite (each SIGSTOP alone takes 1.8-3 s of it): about six chaos events on a
# few dozen runs, enough to exercise every kind; the long form is DURABLY_TORTURE_S=600.
CHAOS_S = float(os.environ.get("DURABLY_TORTURE_S", "8"))
RUNS = max(24, int(CHAOS_S * 5))
TAG_PREFIX = "durably-torture-"
WORKERS = 3
LEASE_S = 1.5
SETTLED = ("completed", "in_doubt")

# The chaos, then up to 240 s for the fleet to settle (pyproject's default is shorter).
pytestmark = [pytest.mark.torture, pytest.mark.timeout(CHAOS_S + 360)]


class Fleet:
    """Worker processes on one journal and one world, respawned when killed."""

    def __init__(self, url: str, world: str, logs: Path) -> None:
        self.url, self.world, self.logs = url, world, logs
        self.procs: list[subprocess.Popen[str]] = []
        self._files: list[IO[str]] = []
        self.kills = self.stops = self.terminated = self.cut = 0

    def spawn(self) -> subprocess.Popen[str]:
        env = {
            **os.environ,
            "DURABLY_URL": self.url,
            "FLEET_WORLD": self.world,
            "FLEET_LEASE_S": str(LEASE_S),
            "PYTHONPATH": str(HERE),
        }
        log = open(self.logs / f"worker-{len(self._files)}.log", "w")
        self._files.append(log)
        cmd = [sys.executable, "-m", "durably.cli", "worker", "torture_app:engine"]
        cmd += ["--concurrency", "3", "--poll-interval-s", "0.05", "--drain-s", "1"]
        proc = subprocess.Popen(
            cmd, env=env, stdout=log, stderr=subprocess.STDOUT, text=True, cwd=HERE
        )
        self.procs.append(proc)
        return proc

    def live(self) -> list[subprocess.Popen[str]]:
        return [p for p in self.procs if p.poll() is None]

    def kill_one(self, rng: random.Random) -> None:
        victim = rng.choice(self.live())
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait(30)
        self.kills += 1
        self.spawn()

    def stop_one(self, rng: random.Random) -> None:
        """SIGSTOP a worker past its lease, then let it go on."""
        victim = rng.choice(self.live())
        os.kill(victim.pid, signal.SIGSTOP)
        time.sleep(LEASE_S * rng.uniform(1.2, 2.0))
        os.kill(victim.pid, signal.SIGCONT)
        self.stops += 1

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGCONT)
                p.kill()
            p.wait(30)
        for f in self._files:
            f.close()

    def log_text(self) -> str:
        return "".join(p.read_text() for p in sorted(self.logs.glob("worker-*.log")))


@pytest.fixture
def proxy(journal_url: str) -> Iterator[Forwarder | None]:
    """On PostgreSQL, a TCP proxy the workers reach the server through (None on SQLite)."""
    if not journal_url.startswith("postgresql"):
        yield None
        return
    from psycopg.conninfo import conninfo_to_dict

    info = conninfo_to_dict(journal_url)
    host, port = str(info.get("host") or "127.0.0.1"), int(info.get("port") or 5432)
    fwd = Forwarder((host, port))
    fwd.open()
    yield fwd
    fwd.close()


@pytest.fixture
def tagged_url(journal_url: str) -> str:
    """The journal URL with an application_name of this test's own on PostgreSQL, so the
    chaos terminates this fleet's sessions only, never another test run's on the server."""
    if not journal_url.startswith("postgresql"):
        return journal_url
    import uuid

    sep = "&" if "?" in journal_url else "?"
    return f"{journal_url}{sep}application_name={TAG_PREFIX}{uuid.uuid4().hex[:8]}"


@pytest.fixture
def fleet(tagged_url: str, proxy: Forwarder | None, tmp_path: Path) -> Iterator[Fleet]:
    world = str(tmp_path / "world.db")
    torture_app.init_world(world)
    url = tagged_url
    if proxy is not None:
        host, port = proxy.target
        assert f"@{host}:{port}/" in url, "the proxy rewrites a postgresql://user@host:port/ URL"
        url = url.replace(f"@{host}:{port}/", f"@127.0.0.1:{proxy.port}/", 1)
    f = Fleet(url, world, tmp_path)
    yield f
    f.close()


def terminate_sessions(url: str, rng: random.Random) -> int:
    """Terminate one or two random sessions of this test's fleet (its pools, listeners and
    owner-lock sessions, named after ``url``'s application_name)."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    app = str(conninfo_to_dict(url)["application_name"])
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name LIKE %s"
            " AND pid <> pg_backend_pid()",
            (f"{app}%",),
        ).fetchall()
        victims = rng.sample([r[0] for r in rows], min(len(rows), rng.randint(1, 2)))
        for pid in victims:
            conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
    return len(victims)


def test_torture_workers_under_random_kills_stops_and_dropped_connections(
    fleet: Fleet, proxy: Forwarder | None, tagged_url: str
) -> None:
    seed = int(os.environ.get("DURABLY_TORTURE_SEED", str(random.randrange(1 << 30))))
    rng = random.Random(seed)
    engine = torture_app.make_engine(tagged_url)
    try:
        # Runs start all along the chaos, so it lands on runs in every phase.
        ids = [engine.start("torture", i).run_id for i in range(RUNS // 4)]
        for _ in range(WORKERS):
            fleet.spawn()
        chaos: list[Callable[[], None]] = [
            lambda: fleet.kill_one(rng),
            lambda: fleet.stop_one(rng),
        ]
        if proxy is not None:

            def terminate() -> None:
                fleet.terminated += terminate_sessions(tagged_url, rng)

            def cut() -> None:
                fleet.cut += proxy.drop()

            chaos += [terminate, terminate, cut]
        begin = time.monotonic()
        end = begin + CHAOS_S
        while time.monotonic() < end:
            due = RUNS // 4 + int((RUNS - RUNS // 4) * (time.monotonic() - begin) / CHAOS_S)
            ids += [engine.start("torture", i).run_id for i in range(len(ids), min(due, RUNS))]
            time.sleep(rng.uniform(0.05, 0.6))
            rng.choice(chaos)()
        ids += [engine.start("torture", i).run_id for i in range(len(ids), RUNS)]
        # The chaos is over: the fleet must settle every run by itself.
        wait_until(
            lambda: all(engine.get_run(r).status in (*SETTLED, "failed", "blocked") for r in ids),
            240,
            f"every run to settle (seed {seed})",
        )
        report(engine, fleet, ids, seed)
    finally:
        engine.close()


def report(engine: durably.Engine, fleet: Fleet, ids: list[str], seed: int) -> None:
    """Check the invariants; the figures go to the test's output (``-s`` shows them)."""
    problems: list[str] = []
    statuses = {r: engine.get_run(r) for r in ids}
    for rid, run in statuses.items():
        if run.status not in SETTLED:
            problems.append(
                f"{rid}: ended {run.status}: {run.error_type} {run.error_message} {run.park_reason}"
            )
    with sqlite3.connect(fleet.world) as w:
        keys = w.execute("SELECT run_id, count(*) FROM effects GROUP BY run_id").fetchall()
        for rid, n in keys:
            if n > 2:
                problems.append(f"{rid}: {n} distinct keys for 2 keyed effects")
        twice = w.execute(
            "SELECT run_id, count(*) FROM runs_of WHERE step = 'notify' GROUP BY run_id"
            " HAVING count(*) > 1"
        ).fetchall()
        problems += [f"{rid}: unkeyed effect executed {n} times" for rid, n in twice]
        execs = w.execute("SELECT run_id, step, started, pid, token FROM runs_of").fetchall()
    problems += reruns(engine, ids, execs)
    counts = {s: sum(r.status == s for r in statuses.values()) for s in SETTLED}
    print(
        f"\ntorture seed={seed}: {len(ids)} runs {counts}, {fleet.kills} SIGKILLs,"
        f" {fleet.stops} SIGSTOPs past the lease, {fleet.terminated} sessions terminated,"
        f" {fleet.cut} connections cut,"
        f" {len(execs)} step executions, {len(problems)} problems"
    )
    assert not problems, f"seed {seed}:\n" + "\n".join(problems[:30])
    assert "Traceback" not in fleet.log_text(), fleet.log_text()[-4000:]


def reruns(
    engine: durably.Engine, ids: list[str], execs: list[tuple[str, str, float, int, int]]
) -> list[str]:
    """Executions of a step by an owner that claimed the run after the step's record was
    written (so it loaded the record and must have replayed it).

    The record's writer holds the newest token among the executions that started before
    the record's ``finished_at`` (a later claim before the commit would have refused the
    write); an execution with a newer token is a re-run. Older tokens are stale owners
    whose step was already in flight (a SIGSTOP), which fencing, not replay, handles.
    """
    found = []
    for rid in ids:
        for rec in engine.history(rid):
            if rec.status != "ok" or rec.finished_at is None:
                continue
            mine = [e for e in execs if e[0] == rid and e[1] == rec.name]
            before = [e[4] for e in mine if e[2] <= rec.finished_at]
            writer = max(before, default=-1)
            found += [
                f"{rid}: step {rec.name} ran again in pid {e[3]} (token {e[4]} > {writer})"
                for e in mine
                if e[4] > writer
            ]
    return found
