"""The dashboard's security, against a real uvicorn server on 127.0.0.1 (and the real
``durably ui`` command in a subprocess): tokens, the session cookie, Bearer, the Host
check, CSRF, the approver's name, and the refusals to start."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import durably
from durably.ui import security_for

from .conftest import Served, make_engine, pending_digest, populate, serve

ROUTES = (
    "/runs",
    "/run?id=refund-1",
    "/inbox",
    "/approvals",
    "/run/live?id=refund-1",
    "/run/events?id=refund-1",
    "/static/ui.js",
    "/",
)


def test_every_route_needs_the_token(served: Served) -> None:
    with httpx.Client(base_url=served.url) as anon:
        for path in ROUTES:
            r = anon.get(path)
            assert r.status_code == 403, path
            assert "needs its token" in r.text
        wrong = anon.get("/runs?token=not-the-token")
        assert wrong.status_code == 403
        assert "durably_ui_session" not in anon.cookies
        assert anon.get("/runs", headers={"Authorization": "Bearer nope"}).status_code == 403
        bad_cookie = anon.get("/runs", headers={"Cookie": "durably_ui_session=forged"})
        assert bad_cookie.status_code == 403


def test_the_token_sets_an_httponly_strict_cookie_and_leaves_the_address(
    served: Served,
) -> None:
    token = served.security.login_token
    with httpx.Client(base_url=served.url) as c:
        r = c.get(f"/runs?status=parked&token={token}")
        assert r.status_code == 200
        cookie = r.headers["set-cookie"]
        assert cookie.startswith("durably_ui_session=")
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
        assert token not in cookie
        # The page reloads itself at the same address without the token.
        assert 'url=/runs?status=parked"' in r.text and str(token) not in r.text
        assert c.get("/runs?status=parked").status_code == 200
        # The reload never leaves the site, whatever the path.
    with httpx.Client() as fresh:
        r = fresh.get(f"{served.url}//evil.example/x?token={token}")
        assert r.status_code == 200 and "url=/runs" in r.text and "evil" not in r.text


def test_bearer_works_without_cookies_or_csrf(served: Served) -> None:
    token = served.security.login_token
    request_id, digest = pending_digest(served.engine, "refund-1")
    with httpx.Client(base_url=served.url, headers={"Authorization": f"Bearer {token}"}) as c:
        assert c.get("/runs").status_code == 200
        r = c.post(
            "/actions/approve",
            data={"run_id": "refund-1", "request_id": request_id, "digest": digest},
        )
        assert r.status_code == 200, r.text
    assert served.engine.pending_approvals("refund-1") == []


def test_a_post_without_the_token_is_403_and_changes_nothing(served: Served) -> None:
    request_id, digest = pending_digest(served.engine, "refund-1")
    csrf = served.csrf()
    form = {"csrf": csrf, "run_id": "refund-1", "request_id": request_id, "digest": digest}
    with httpx.Client(base_url=served.url) as anon:
        anon.cookies.set("durably_ui_csrf", csrf)
        for action in ("approve", "reject", "cancel", "retry", "fork", "signal"):
            r = anon.post(f"/actions/{action}", data={**form, "name": "go", "at": "0"})
            assert r.status_code == 403, action
    assert served.engine.pending_approvals("refund-1") != []
    assert served.engine.get_run("refund-1").cancel_requested_at is None
    assert served.engine.get_run("boom-1").status == "failed"


def test_a_post_without_a_matching_csrf_field_is_403_and_changes_nothing(
    served: Served,
) -> None:
    request_id, digest = pending_digest(served.engine, "refund-1")
    form = {"run_id": "refund-1", "request_id": request_id, "digest": digest}
    for bad in ({}, {"csrf": ""}, {"csrf": "x" * 32}):
        r = served.client.post("/actions/approve", data={**form, **bad})
        assert r.status_code == 403
        assert "CSRF" in r.text
    # The session alone (a form posted from another site carries it, not the CSRF cookie).
    session = served.client.cookies.get("durably_ui_session")
    with httpx.Client(base_url=served.url) as other:
        other.cookies.set("durably_ui_session", str(session))
        r = other.post("/actions/approve", data={**form, "csrf": served.csrf()})
        assert r.status_code == 403
        r = other.post("/actions/cancel", data={"run_id": "wait-1", "csrf": "guess"})
        assert r.status_code == 403
    assert served.engine.pending_approvals("refund-1") != []
    assert served.engine.get_run("wait-1").cancel_requested_at is None


def test_the_host_header_is_checked(served: Served) -> None:
    for host in ("evil.example", "evil.example:8765", "127.0.0.1.evil.example"):
        r = served.client.get("/runs", headers={"Host": host})
        assert r.status_code == 403, host
        assert "Host header" in r.text
    for host in ("localhost", "127.0.0.1", "[::1]"):
        port = served.url.rsplit(":", 1)[1]
        assert served.client.get("/runs", headers={"Host": f"{host}:{port}"}).status_code == 200


def test_named_tokens_decide_under_their_name(journal_url: str) -> None:
    engine = make_engine(journal_url)
    populate(engine)
    env = {"DURABLY_UI_TOKENS": "ana:ana-secret-0123456789,bob:bob-secret-0123456789"}
    security = security_for("127.0.0.1", env=env, user="someone-else")
    assert security.login_token is None
    try:
        with serve(engine, security) as url:
            request_id, digest = pending_digest(engine, "refund-1")
            with httpx.Client(base_url=url) as c:
                assert c.get("/runs?token=bob-secret-0123456789").status_code == 200
                c.get("/runs")
                r = c.post(
                    "/actions/approve",
                    data={
                        "csrf": c.cookies["durably_ui_csrf"],
                        "run_id": "refund-1",
                        "request_id": request_id,
                        "digest": digest,
                        "by": "ana",
                        "user": "ana",
                    },
                )
                assert r.status_code == 200 and "as bob" in r.text
        assert engine.resume("refund-1") == {"outcome": "approved", "by": "bob"}
    finally:
        engine.close()


def test_no_token_on_loopback_serves_without_one(journal_url: str) -> None:
    engine = make_engine(journal_url)
    populate(engine)
    security = security_for("127.0.0.1", no_token=True, env={})
    try:
        with serve(engine, security) as url, httpx.Client(base_url=url) as c:
            assert c.get("/runs").status_code == 200
            # Host and CSRF checks still hold.
            assert c.get("/runs", headers={"Host": "evil.example"}).status_code == 403
            assert c.post("/actions/cancel", data={"run_id": "wait-1"}).status_code == 403
        assert engine.get_run("wait-1").cancel_requested_at is None
    finally:
        engine.close()


def test_security_settings_refuse_unsafe_binds() -> None:
    with pytest.raises(durably.ConfigError, match=r"DURABLY_UI_TOKEN=SECRET.*DURABLY_UI_TOKENS"):
        security_for("0.0.0.0", env={})
    with pytest.raises(durably.ConfigError, match="loopback only"):
        security_for("192.168.1.10", no_token=True, env={"DURABLY_UI_TOKEN": "s" * 20})
    with pytest.raises(durably.ConfigError, match="at least 16"):
        security_for("0.0.0.0", env={"DURABLY_UI_TOKEN": "short"})
    with pytest.raises(durably.ConfigError, match="NAME:SECRET"):
        security_for("0.0.0.0", env={"DURABLY_UI_TOKENS": "ana-without-secret"})
    sec = security_for("0.0.0.0", env={"DURABLY_UI_TOKEN": "s" * 20})
    assert sec.login_token is None and sec.required and sec.user is None
    assert sec.check_host("anything:1")  # every interface: any name, the token is required
    sec = security_for("10.1.2.3", env={"DURABLY_UI_TOKEN": "s" * 20})
    assert sec.check_host("10.1.2.3:8765") and not sec.check_host("localhost:8765")


def _cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DURABLY_UI_")}
    env.update(extra)
    return env


def test_the_command_refuses_a_public_bind_without_a_token(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'j.db'}"
    make_engine(db).close()
    out = subprocess.run(
        [sys.executable, "-m", "durably.cli", "ui", "--db", db, "--host", "0.0.0.0"],
        capture_output=True,
        text=True,
        timeout=60,
        env=_cli_env(),
    )
    assert out.returncode == 1
    assert "DURABLY_UI_TOKEN" in out.stderr and "DURABLY_UI_TOKENS" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.fixture
def cli_server(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """``durably ui`` in a subprocess on a free port; yields the URL it printed."""
    import socket

    db = f"sqlite:///{tmp_path / 'j.db'}"
    engine = make_engine(db)
    populate(engine)
    engine.close()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "durably.cli", "ui", "--db", db, "--port", str(port)],
        stderr=subprocess.PIPE,
        text=True,
        env=_cli_env(),
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        m = re.search(r"open (http://\S+)", line)
        assert m, line
        url = m.group(1)
        deadline = time.monotonic() + 20
        while True:
            try:
                httpx.get(url.split("/runs")[0] + "/runs", timeout=2)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "durably ui did not start"
                time.sleep(0.05)
        yield url, proc
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


def test_the_command_prints_a_url_with_a_fresh_token(
    cli_server: tuple[str, subprocess.Popen[str]],
) -> None:
    url, _proc = cli_server
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/runs\?token=[A-Za-z0-9_-]{40,}", url)
    base = url.split("?")[0]
    with httpx.Client() as c:
        assert c.get(base).status_code == 403
        assert c.get(url).status_code == 200
        page = c.get(base)
        assert page.status_code == 200 and ">refund-1</a>" in page.text
