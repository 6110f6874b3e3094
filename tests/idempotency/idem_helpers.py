"""Helpers shared by the idempotency tests (a distinct module name, to avoid clashes)."""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx

SRC = Path(__file__).resolve().parents[2] / "src"
HERE = Path(__file__).resolve().parent
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


class FakeClock:
    """Epoch seconds that move only when a test says so."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds``."""
        self.now += seconds


def subprocess_env() -> dict[str, str]:
    """The environment for child processes: this checkout's src and examples importable."""
    env = dict(os.environ)
    parts = [str(SRC), str(EXAMPLES), str(HERE), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in parts if p)
    return env


def count_lines(path: Path) -> int:
    """Count the effect marks a test's functions appended to ``path``."""
    return len(path.read_text().splitlines()) if path.exists() else 0


def count_rows(db_path: Path, table: str) -> int:
    """Count rows in a table of a SQLite file that is not the store under test."""
    with sqlite3.connect(db_path) as conn:
        return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


def wait_for_server(
    proc: subprocess.Popen[bytes], port_file: Path, *, timeout_s: float = 30.0
) -> str:
    """Wait until a server child wrote its port and answers ``/healthz``; its base URL."""
    deadline = time.monotonic() + timeout_s
    while True:
        assert proc.poll() is None, "the server exited during start-up"
        assert time.monotonic() < deadline, "the server did not start"
        if port_file.exists():
            base_url = f"http://127.0.0.1:{port_file.read_text()}"
            try:
                if httpx.get(f"{base_url}/healthz").status_code == 200:
                    return base_url
            except httpx.TransportError:
                pass
        time.sleep(0.05)


def serve(app: Any, port_file: str) -> None:
    """Run ``app`` under uvicorn on a free port of 127.0.0.1, written to ``port_file``."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    tmp = Path(port_file + ".tmp")
    tmp.write_text(str(sock.getsockname()[1]))
    os.replace(tmp, port_file)  # the test never reads half a number
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])
