"""Fixtures of the dashboard tests: a journal with runs in every state the pages show,
and the app served by a real uvicorn server on 127.0.0.1."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import uvicorn

import durably
from durably.ui import create_app, security_for
from durably.ui.auth import Security

CHAT = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "model": "gpt-test",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "I will look the order up.",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "lookup_order", "arguments": '{"order": 7}'},
                    }
                ],
            },
            "finish_reason": "tool_calls",
        }
    ],
    "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
}


class Server:
    """A uvicorn server in a thread, on a free port of 127.0.0.1."""

    def __init__(self, app: Any) -> None:
        config = uvicorn.Config(
            app, host="127.0.0.1", port=0, log_level="error", timeout_graceful_shutdown=1
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@dataclass
class Served:
    """The engine, the server's base URL, its security, and a logged-in client."""

    engine: durably.Engine
    url: str
    security: Security
    client: httpx.Client

    def csrf(self) -> str:
        """The CSRF value the client's cookie holds (as the forms carry it)."""
        value = self.client.cookies.get("durably_ui_csrf")
        assert value
        return value

    def post(self, action: str, **fields: str) -> httpx.Response:
        """POST a button's form, with the CSRF field as the page would send it."""
        return self.client.post(f"/actions/{action}", data={"csrf": self.csrf(), **fields})


def login(url: str, token: str) -> httpx.Client:
    """A client that opened the printed URL: it holds the session and CSRF cookies."""
    client = httpx.Client(base_url=url, timeout=30)
    r = client.get(f"/runs?token={token}")
    assert r.status_code == 200, r.text
    assert "durably_ui_session" in client.cookies
    assert client.get("/runs").status_code == 200  # the reload: sets the CSRF cookie
    return client


@contextmanager
def serve(engine: durably.Engine, security: Security) -> Iterator[str]:
    """Serve the app for ``engine``; yields the base url."""
    server = Server(create_app(engine, security, db_label="test journal"))
    try:
        yield server.url
    finally:
        server.stop()


def make_engine(url: str) -> durably.Engine:
    """An engine with the tests' workflows, whose runs return at once when they park."""
    engine = durably.Engine(url, park_wait_s=0)

    @engine.workflow(name="refund", version="2")
    def refund(ctx: durably.Context, amount: int) -> dict[str, Any]:
        ctx.step("lookup", lambda: {"order": 7})
        d = ctx.request_approval("refund", {"amount": amount, "memo": "pay\u200bme"})
        return {"outcome": d.outcome, "by": d.by}

    @engine.workflow(name="waiter")
    def waiter(ctx: durably.Context) -> Any:
        return ctx.wait_for_signal("go", timeout_s=3600)

    @engine.workflow(name="agent")
    def agent(ctx: durably.Context) -> str:
        ctx.budget(tokens=1000, cost_usd=0.5)
        ctx.step("openai.chat.completions.create", _chat)
        ctx.step("lookup_order", lambda: {"order": 7, "status": "shipped"})
        ctx.step("big", lambda: "x" * 5000)
        return "done"

    @engine.workflow(name="boom")
    def boom(ctx: durably.Context) -> None:
        ctx.step("fine", lambda: 1)
        ctx.step("explode", _explode)

    return engine


def _chat() -> dict[str, Any]:
    durably.usage(tokens=15, cost_usd=0.002)
    return CHAT


def _explode() -> None:
    raise ValueError("the <b>tool</b> broke")


def populate(engine: durably.Engine) -> None:
    """One run in each state the pages show (ids say which)."""
    for run_id, wf, args in (
        ("refund-1", "refund", (20,)),
        ("wait-1", "waiter", ()),
    ):
        with pytest.raises(durably.RunParked):
            engine.run(wf, *args, run_id=run_id)
    assert engine.run("agent", run_id="agent-1") == "done"
    with pytest.raises(durably.WorkflowFailed):
        engine.run("boom", run_id="boom-1")
    engine.start("agent", run_id="queued-1", queue="slow")


@pytest.fixture
def served(journal_url: str) -> Iterator[Served]:
    """The app on a journal holding :func:`populate`'s runs, and a logged-in client."""
    engine = make_engine(journal_url)
    populate(engine)
    security = security_for("127.0.0.1", env={}, user="tester")
    assert security.login_token is not None
    try:
        with serve(engine, security) as url:
            client = login(url, security.login_token)
            try:
                yield Served(engine, url, security, client)
            finally:
                client.close()
    finally:
        engine.close()


def pending_digest(engine: durably.Engine, run_id: str) -> tuple[str, str]:
    """(request_id, digest) of the run's one pending approval."""
    (p,) = engine.pending_approvals(run_id)
    return p.request_id, p.digest


def sse_messages(text: str) -> list[dict[str, Any]]:
    """The journal events of an SSE body, as dicts (plus their ``id`` line)."""
    out = []
    for block in text.split("\n\n"):
        m = re.search(r"^id: (\d+)\nevent: journal\ndata: (.*)$", block, re.M)
        if m:
            out.append({"id": int(m.group(1)), **json.loads(m.group(2))})
    return out
