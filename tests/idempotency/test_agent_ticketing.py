"""The example agent against the real ticketing service: a SIGKILL in the effect window of
its HTTP step, then a resume that sends the same key and gets the same ticket."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import httpx
from idem_helpers import subprocess_env
from test_ticketing_http import start_server

AGENT = Path(__file__).resolve().parents[2] / "examples" / "ticketing_agent.py"


def run_agent(tmp: Path, base_url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            str(AGENT),
            "alert-7",
            "--service",
            base_url,
            "--db",
            f"sqlite:///{tmp / 'agent.db'}",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=subprocess_env(),
    )


def test_agent_killed_after_the_ticket_was_made_gets_it_back(tmp_path: Path) -> None:
    server = start_server(tmp_path, f"sqlite:///{tmp_path / 'idem.db'}", pause_s=0, lease_s=5)
    try:
        killed = run_agent(tmp_path, server.base_url, "--crash-at", "1:effect")
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        assert len(httpx.get(f"{server.base_url}/tickets").json()) == 1  # it was made
        resumed = run_agent(tmp_path, server.base_url)
        assert resumed.returncode == 0, resumed.stderr
        result = json.loads(resumed.stdout)
        tickets = httpx.get(f"{server.base_url}/tickets").json()
        assert len(tickets) == 1 and result == {"ticket": tickets[0]["id"], "replayed": True}
        again = run_agent(tmp_path, server.base_url)  # finished: the recorded outcome
        assert json.loads(again.stdout) == result
    finally:
        server.kill()
