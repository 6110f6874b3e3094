"""Tenancy and cancellation on a real uvicorn server with real clients.

Two clients with their own credentials share key values; an anonymous client resends
another's key and body; a client gives up while the server waits for the store.
"""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from idem_helpers import HERE, subprocess_env, wait_for_server


@dataclass
class Service:
    """The running tenant server and the files it shares with the test."""

    base_url: str
    effects: Path
    cancelled: Path
    idem_db: Path

    def post(self, token: str | None, key: str, body: Any, **kwargs: Any) -> httpx.Response:
        headers = {"Idempotency-Key": key}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        return httpx.post(f"{self.base_url}/notes", json=body, headers=headers, **kwargs)

    def effect_lines(self) -> list[str]:
        return self.effects.read_text().splitlines() if self.effects.exists() else []


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    workdir = tmp_path_factory.mktemp("tenants")
    port_file = workdir / "port"
    svc = Service("", workdir / "effects", workdir / "cancelled", workdir / "idem.db")
    proc = subprocess.Popen(
        [
            sys.executable,
            str(HERE / "tenant_server.py"),
            "--idem-url",
            f"sqlite:///{svc.idem_db}",
            "--effects",
            str(svc.effects),
            "--cancelled",
            str(svc.cancelled),
            "--port-file",
            str(port_file),
        ],
        env=subprocess_env(),
    )
    try:
        svc.base_url = wait_for_server(proc, port_file)
        yield svc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def test_keys_and_replays_never_cross_clients(service: Service) -> None:
    key, body = uuid.uuid4().hex, {"title": "hello"}
    alice = service.post("alice-token", key, body)
    assert alice.status_code == 201 and alice.json()["secret"] == "secret-of-alice"
    assert "session-of-alice" in alice.headers["set-cookie"]
    # Bob's request with the same key is his own request: it runs, under his identity.
    bob = service.post("bob-token", key, body)
    assert bob.status_code == 201 and "idempotent-replayed" not in bob.headers
    assert bob.json()["secret"] == "secret-of-bob"
    # An anonymous client resending Alice's key and body gets no stored response.
    anonymous = service.post(None, key, body)
    assert anonymous.status_code == 401 and "secret" not in anonymous.text
    assert "set-cookie" not in anonymous.headers
    # Alice's own retry replays her outcome, without anyone's session cookie.
    replay = service.post("alice-token", key, body)
    assert replay.headers["idempotent-replayed"] == "true"
    assert replay.json() == alice.json() and "set-cookie" not in replay.headers
    assert service.effect_lines().count("alice:hello") == 1
    assert service.effect_lines().count("bob:hello") == 1


def test_a_401_under_a_guessed_key_is_not_replayed_to_its_owner(service: Service) -> None:
    key, body = uuid.uuid4().hex, {"title": "guessed"}
    assert service.post(None, key, body).status_code == 401  # an attacker goes first
    owner = service.post("alice-token", key, body)
    assert owner.status_code == 201 and "idempotent-replayed" not in owner.headers
    assert service.effect_lines().count("alice:guessed") == 1


def test_a_request_cancelled_while_claiming_its_key_does_not_block_it(service: Service) -> None:
    key, body = uuid.uuid4().hex, {"title": "cancelled"}
    service.cancelled.unlink(missing_ok=True)
    # Another writer holds the store's database, so the server's claim waits in its thread.
    blocker = sqlite3.connect(service.idem_db, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(httpx.ReadTimeout):
            service.post("alice-token", key, body, timeout=1.0)  # the client gives up
        deadline = time.monotonic() + 30
        while not service.cancelled.exists():
            assert time.monotonic() < deadline, "the server never saw the disconnect"
            time.sleep(0.05)
    finally:
        blocker.execute("ROLLBACK")  # the abandoned claim commits now
        blocker.close()
    # Let the abandoned claim commit before the retry (else the retry could claim first).
    # Released at once, it may come and go before we look: then wait a few seconds.
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and not _claimed(service.idem_db, key):
        time.sleep(0.05)
    # The retry runs (perhaps after a moment while the abandoned claim is released); it
    # does not get 409 for as long as the server lives.
    deadline = time.monotonic() + 30
    while True:
        retry = service.post("alice-token", key, body)
        if retry.status_code != 409:
            break
        assert time.monotonic() < deadline, "the abandoned claim still blocks the key"
        time.sleep(0.2)
    assert retry.status_code == 201 and "idempotent-replayed" not in retry.headers
    assert service.effect_lines().count("alice:cancelled") == 1


def _claimed(db: Path, key: str) -> bool:
    with sqlite3.connect(db) as conn:
        sql = "SELECT 1 FROM durably_idempotency_keys WHERE key = ?"
        return conn.execute(sql, (key,)).fetchone() is not None
