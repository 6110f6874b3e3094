"""The ticketing example behind a real uvicorn server, driven over HTTP with httpx.

Servers are child processes, so the crash test can SIGKILL one in the middle of a request
and start another on the same databases.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from idem_helpers import HERE, count_rows, subprocess_env, wait_for_server

START_TIMEOUT_S = 30.0


@dataclass
class Server:
    """A running ticketing server and the files it shares with the test."""

    proc: subprocess.Popen[bytes]
    base_url: str
    tickets_db: Path
    clock_file: Path
    pause_file: Path

    def post(self, key: str | None, body: Any, **kwargs: Any) -> httpx.Response:
        headers = {"Idempotency-Key": key} if key is not None else {}
        return httpx.post(f"{self.base_url}/tickets", json=body, headers=headers, **kwargs)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def tickets_titled(self, title: str) -> int:
        return sum(1 for t in httpx.get(f"{self.base_url}/tickets").json() if t["title"] == title)


def start_server(workdir: Path, idem_url: str, *, pause_s: float, lease_s: float) -> Server:
    port_file = workdir / f"port-{uuid.uuid4().hex}"
    paths = {
        "db": workdir / "tickets.db",
        "clock": workdir / "clock-offset",
        "pause": workdir / "paused",
    }
    proc = subprocess.Popen(
        [
            sys.executable,
            str(HERE / "ticketing_server.py"),
            "--db",
            str(paths["db"]),
            "--idem-url",
            idem_url,
            "--clock-file",
            str(paths["clock"]),
            "--pause-file",
            str(paths["pause"]),
            "--port-file",
            str(port_file),
            "--pause-s",
            str(pause_s),
            "--lease-s",
            str(lease_s),
        ],
        env=subprocess_env(),
    )
    base_url = wait_for_server(proc, port_file, timeout_s=START_TIMEOUT_S)
    return Server(proc, base_url, paths["db"], paths["clock"], paths["pause"])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    workdir = tmp_path_factory.mktemp("ticketing")
    s = start_server(workdir, f"sqlite:///{workdir / 'idem.db'}", pause_s=0.8, lease_s=5)
    yield s
    s.kill()


def new_key() -> str:
    return uuid.uuid4().hex


def test_retry_replays_the_stored_response(server: Server):
    key, body = new_key(), {"title": "disk full on db-3", "priority": "high"}
    first = server.post(key, body)
    assert first.status_code == 201 and "idempotent-replayed" not in first.headers
    ticket = first.json()
    assert ticket["title"] == body["title"] and first.headers["location"].endswith(
        str(ticket["id"])
    )
    for _ in range(3):
        again = server.post(key, body)
        assert again.status_code == 201 and again.json() == ticket
        assert again.headers["idempotent-replayed"] == "true"
        assert again.headers["location"] == first.headers["location"]
    assert server.tickets_titled(body["title"]) == 1


def test_missing_key_is_400_and_creates_nothing(server: Server):
    response = server.post(None, {"title": "no key"})
    assert response.status_code == 400
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["code"] == "idempotency_key_missing"
    assert server.tickets_titled("no key") == 0


def test_same_key_with_another_body_is_422(server: Server):
    key = new_key()
    assert server.post(key, {"title": "first"}).status_code == 201
    response = server.post(key, {"title": "second"})
    assert response.status_code == 422
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["code"] == "idempotency_key_reused"
    assert server.tickets_titled("second") == 0


def test_concurrent_retries_get_409_and_the_ticket_is_created_once(server: Server):
    key, body = new_key(), {"title": f"slow {uuid.uuid4().hex}"}
    barrier = threading.Barrier(8)
    responses: list[httpx.Response] = []
    lock = threading.Lock()

    def send() -> None:
        barrier.wait()
        response = server.post(key, body, timeout=30)
        with lock:
            responses.append(response)

    threads = [threading.Thread(target=send) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    kinds = Counter(
        "replayed" if r.headers.get("idempotent-replayed") else str(r.status_code)
        for r in responses
    )
    assert kinds["201"] == 1 and kinds["409"] >= 1, kinds
    assert kinds["201"] + kinds["409"] + kinds["replayed"] == 8
    conflict = next(r for r in responses if r.status_code == 409)
    assert conflict.json()["code"] == "idempotency_key_in_flight"
    assert conflict.headers["retry-after"] == "1"
    assert server.tickets_titled(body["title"]) == 1
    assert server.post(key, body).headers["idempotent-replayed"] == "true"


def test_client_errors_of_the_app_are_stored_too(server: Server):
    key = new_key()
    first = server.post(key, {"title": ""})
    assert first.status_code == 400 and "title" in first.json()["detail"]
    again = server.post(key, {"title": ""})
    assert again.status_code == 400 and again.headers["idempotent-replayed"] == "true"


def test_keys_expire_after_the_window(server: Server):
    key = new_key()
    first = server.post(key, {"title": "before expiry"})
    assert first.status_code == 201
    try:
        # Stored first: just inside the window a retry replays and creates nothing.
        server.clock_file.write_text(str(3600 - 30))
        inside = server.post(key, {"title": "before expiry"})
        assert inside.headers["idempotent-replayed"] == "true" and inside.json() == first.json()
        assert server.tickets_titled("before expiry") == 1
        server.clock_file.write_text(str(3600 + 1))  # the server's clock jumps an hour on
        fresh = server.post(key, {"title": "after expiry"})
        assert fresh.status_code == 201 and "idempotent-replayed" not in fresh.headers
        assert server.tickets_titled("after expiry") == 1
    finally:
        server.clock_file.write_text("0")


def test_server_killed_mid_request_then_a_retry_succeeds_once(db_url: str, tmp_path: Path):
    key, body = new_key(), {"title": "slow: page the on-call"}
    doomed = start_server(tmp_path, db_url, pause_s=60, lease_s=1.5)
    lost: list[BaseException] = []

    def send() -> None:
        try:
            doomed.post(key, body, timeout=30)
        except httpx.TransportError as exc:
            lost.append(exc)

    client = threading.Thread(target=send)
    try:
        client.start()
        deadline = time.monotonic() + 10
        while not doomed.pause_file.exists():
            assert time.monotonic() < deadline, "the request never reached the handler"
            time.sleep(0.02)
    finally:
        doomed.kill()  # SIGKILL while the request is inside the handler
    client.join(10)
    assert lost, "the first request should have lost its connection"
    killed_at = time.monotonic()

    restarted = start_server(tmp_path, db_url, pause_s=0, lease_s=1.5)
    try:
        while True:
            response = restarted.post(key, body)
            if response.status_code != 409:
                break
            # The dead server's in-flight marker holds the key until its lease runs out.
            assert time.monotonic() - killed_at < 15, "the lease never ran out"
            time.sleep(0.1)
        assert response.status_code == 201 and "idempotent-replayed" not in response.headers
        assert count_rows(restarted.tickets_db, "tickets") == 1
        replay = restarted.post(key, body)
        assert replay.headers["idempotent-replayed"] == "true"
        assert replay.json() == response.json()
        assert count_rows(restarted.tickets_db, "tickets") == 1
    finally:
        restarted.kill()
