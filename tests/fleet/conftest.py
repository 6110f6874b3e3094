"""Fleet fixtures: a journal URL per store kind, a world file, and worker processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fleet_app
from fleet_support import HERE, Spawn

import durably


@pytest.fixture
def world_path(tmp_path: Path) -> str:
    path = str(tmp_path / "world.db")
    fleet_app.init_world(path)
    return path


@pytest.fixture
def spawn_worker(journal_url: str, world_path: str, tmp_path: Path) -> Iterator[Spawn]:
    procs: list[subprocess.Popen[str]] = []
    logs: list[IO[str]] = []

    def spawn(
        lease_s: float = 30,
        concurrency: int = 4,
        extra_env: dict[str, str] | None = None,
        drain_s: float = 5,
    ) -> subprocess.Popen[str]:
        env = {
            **os.environ,
            "DURABLY_URL": journal_url,
            "FLEET_WORLD": world_path,
            "FLEET_LEASE_S": str(lease_s),
            "PYTHONPATH": str(HERE),
            **(extra_env or {}),
        }
        log = open(tmp_path / f"worker-{len(procs)}.log", "w")
        logs.append(log)
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "durably.cli",
                "worker",
                "fleet_app:engine",
                "--concurrency",
                str(concurrency),
                "--poll-interval-s",
                "0.05",
                "--drain-s",
                str(drain_s),
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=HERE,
        )
        procs.append(proc)
        return proc

    yield spawn
    for p in procs:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGCONT)
            p.kill()
        p.wait(10)
    for log in logs:
        log.close()


@pytest.fixture
def engine(
    journal_url: str, world_path: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[durably.Engine]:
    monkeypatch.setenv("FLEET_WORLD", world_path)
    e = fleet_app.make_engine(journal_url)
    yield e
    e.close()
