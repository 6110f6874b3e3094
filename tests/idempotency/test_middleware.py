"""The ASGI middleware in process: status codes, replay, what is stored and what is not."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from idem_helpers import FakeClock

from durably.idempotency import Claim, IdempotencyMiddleware, IdempotencyStore, migrate

Message = dict[str, Any]


class App:
    """A raw ASGI app: counts calls per path and answers according to the path."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        assert scope["type"] == "http"
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        path = scope["path"]
        self.calls[path] = self.calls.get(path, 0) + 1
        n = self.calls[path]
        if path == "/boom":
            raise RuntimeError("handler crashed")
        status = {"/fail": 503, "/missing": 404}.get(path, 201)
        payload = json.dumps({"n": n, "echo": body.decode()}).encode()
        headers = [(b"content-type", b"application/json"), (b"x-call", str(n).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        if path == "/stream":  # several chunks, to check that all of them are stored
            for part in (payload[:5], payload[5:]):
                await send({"type": "http.response.body", "body": part, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        else:
            await send({"type": "http.response.body", "body": payload})


@pytest.fixture
def store(tmp_path: Path, clock: FakeClock) -> Iterator[IdempotencyStore]:
    url = f"sqlite:///{tmp_path / 'idem.db'}"
    migrate(url)
    s = IdempotencyStore(url, clock=clock, ttl_s=100)
    yield s
    s.close()


Requester = Callable[..., httpx.Response]


def client_for(app: Any) -> Requester:
    def request(method: str, path: str, key: str | None = None, **kwargs: Any) -> httpx.Response:
        headers = list(dict(kwargs.pop("headers", {})).items())
        if isinstance(kwargs.get("extra_headers"), list):
            headers += kwargs.pop("extra_headers")
        if key is not None:
            headers.append(("Idempotency-Key", key))

        async def go() -> httpx.Response:
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
                return await client.request(method, path, headers=headers, **kwargs)

        return asyncio.run(go())

    return request


def problem(
    response: httpx.Response, status: int, code: str, type_base: str | None = None
) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    assert body["status"] == status and body["code"] == code and body["detail"]
    assert body["type"] == (f"{type_base}{code}" if type_base else "about:blank")
    assert body["title"]
    return body


def test_replay_returns_the_stored_response(store: IdempotencyStore):
    app = App()
    request = client_for(IdempotencyMiddleware(app, store=store, single_tenant=True))
    first = request("POST", "/tickets", "k1", content=b'{"t": 1}')
    second = request("POST", "/tickets", "k1", content=b'{"t": 1}')
    assert first.status_code == second.status_code == 201
    assert "idempotent-replayed" not in first.headers
    assert second.headers["idempotent-replayed"] == "true"
    assert second.content == first.content and second.headers["x-call"] == "1"
    assert app.calls == {"/tickets": 1}


def test_streamed_response_is_stored_whole(store: IdempotencyStore):
    app = App()
    request = client_for(IdempotencyMiddleware(app, store=store, single_tenant=True))
    first = request("POST", "/stream", "k1", content=b"abc")
    second = request("POST", "/stream", "k1", content=b"abc")
    assert second.json() == first.json() == {"n": 1, "echo": "abc"}


def test_reuse_with_another_payload_path_or_method_is_422(store: IdempotencyStore):
    app = App()
    request = client_for(IdempotencyMiddleware(app, store=store, single_tenant=True))
    request("POST", "/tickets", "k1", content=b"a")
    problem(request("POST", "/tickets", "k1", content=b"b"), 422, "idempotency_key_reused")
    problem(request("POST", "/other", "k1", content=b"a"), 422, "idempotency_key_reused")
    problem(request("PATCH", "/tickets", "k1", content=b"a"), 422, "idempotency_key_reused")
    problem(request("POST", "/tickets?x=1", "k1", content=b"a"), 422, "idempotency_key_reused")
    assert app.calls == {"/tickets": 1}


def test_in_flight_is_409_with_retry_after(store: IdempotencyStore):
    from durably.idempotency import request_fingerprint

    app = App()
    request = client_for(IdempotencyMiddleware(app, store=store, single_tenant=True))
    scope = {"method": "POST", "path": "/tickets", "query_string": b""}
    claim = store.begin("k1", request_fingerprint(scope, b"x"))
    assert isinstance(claim, Claim)
    response = request("POST", "/tickets", "k1", content=b"x")
    problem(response, 409, "idempotency_key_in_flight")
    assert response.headers["retry-after"] == "1"
    assert app.calls == {}


def test_missing_key(store: IdempotencyStore):
    app = App()
    optional = client_for(IdempotencyMiddleware(app, store=store, single_tenant=True))
    assert optional("POST", "/tickets").status_code == 201
    assert optional("POST", "/tickets").status_code == 201  # unprotected: runs twice
    required = client_for(
        IdempotencyMiddleware(app, store=store, single_tenant=True, require_key=True)
    )
    body = problem(required("POST", "/tickets"), 400, "idempotency_key_missing")
    assert "Idempotency-Key" in body["detail"]
    assert required("GET", "/tickets").status_code == 201  # GET is not covered
    assert app.calls == {"/tickets": 3}


def test_invalid_keys_are_400(store: IdempotencyStore):
    request = client_for(IdempotencyMiddleware(App(), store=store, single_tenant=True))
    problem(request("POST", "/t", "x" * 256), 400, "idempotency_key_invalid")
    problem(request("POST", "/t", ""), 400, "idempotency_key_invalid")
    problem(
        request("POST", "/t", extra_headers=[("Idempotency-Key", "a"), ("Idempotency-Key", "b")]),
        400,
        "idempotency_key_invalid",
    )
    # The draft's quoted form names the same key as the bare form.
    assert request("POST", "/t", '"abc"').status_code == 201
    assert request("POST", "/t", "abc").headers["idempotent-replayed"] == "true"


def test_server_errors_are_not_stored_by_default(store: IdempotencyStore):
    app = App()
    request = client_for(IdempotencyMiddleware(app, store=store, single_tenant=True))
    assert request("POST", "/fail", "k1").status_code == 503
    retry = request("POST", "/fail", "k1")
    assert retry.status_code == 503 and "idempotent-replayed" not in retry.headers
    with pytest.raises(RuntimeError, match="handler crashed"):
        request("POST", "/boom", "k2")
    with pytest.raises(RuntimeError, match="handler crashed"):
        request("POST", "/boom", "k2")  # not 409: the crash released the key
    assert app.calls == {"/fail": 2, "/boom": 2}
    # Client errors are final outcomes and are stored.
    assert request("POST", "/missing", "k3").status_code == 404
    assert request("POST", "/missing", "k3").headers["idempotent-replayed"] == "true"


def test_store_server_errors_option(store: IdempotencyStore):
    app = App()
    request = client_for(
        IdempotencyMiddleware(app, store=store, single_tenant=True, store_server_errors=True)
    )
    request("POST", "/fail", "k1")
    replay = request("POST", "/fail", "k1")
    assert replay.status_code == 503 and replay.headers["idempotent-replayed"] == "true"


def test_keys_expire(store: IdempotencyStore, clock: FakeClock):
    app = App()
    request = client_for(IdempotencyMiddleware(app, store=store, single_tenant=True))
    request("POST", "/tickets", "k1", content=b"a")
    # Stored first: a retry just inside the window replays (and another body is refused).
    clock.advance(99)
    assert request("POST", "/tickets", "k1", content=b"a").headers["idempotent-replayed"] == "true"
    problem(request("POST", "/tickets", "k1", content=b"b"), 422, "idempotency_key_reused")
    clock.advance(2)
    fresh = request("POST", "/tickets", "k1", content=b"b")
    assert fresh.status_code == 201 and "idempotent-replayed" not in fresh.headers
    assert fresh.json()["n"] == 2 and app.calls == {"/tickets": 2}


def test_limits_methods_scopes_and_problem_types(store: IdempotencyStore):
    app = App()
    request = client_for(
        IdempotencyMiddleware(
            app,
            store=store,
            methods=["PUT"],
            request_bytes_max=10,
            response_bytes_max=20,
            scope_of=lambda scope: dict(scope["headers"]).get(b"x-client", b"").decode(),
            problem_type_base="https://example.com/problems/",
        )
    )
    too_big = request("PUT", "/t", "k1", content=b"x" * 11)
    assert too_big.status_code == 413
    assert too_big.json()["type"] == "https://example.com/problems/request_too_large"
    assert request("POST", "/t", "k1").status_code == 201  # POST is not covered here
    # A response over response_bytes_max is sent; a retry gets a clear refusal and the
    # work does not run again.
    assert request("PUT", "/big", "k2", content=b"0123456789").status_code == 201
    refused = request("PUT", "/big", "k2", content=b"0123456789")
    body = problem(refused, 500, "response_not_replayable", "https://example.com/problems/")
    assert "not run twice" in body["detail"] and "201" in body["detail"]
    # Scopes: the same key from two clients names two requests.
    a = request("PUT", "/t", "k3", headers={"x-client": "a"})
    b = request("PUT", "/t", "k3", content=b"other", headers={"x-client": "b"})
    assert a.status_code == b.status_code == 201
    assert app.calls["/big"] == 1


def test_non_http_scopes_pass_through(store: IdempotencyStore):
    seen: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope["type"])

    middleware = IdempotencyMiddleware(app, store=store, single_tenant=True)

    async def receive() -> Message:
        return {"type": "lifespan.startup"}

    async def send(message: Message) -> None:
        pass

    asyncio.run(middleware({"type": "lifespan"}, receive, send))
    assert seen == ["lifespan"]


class StatusApp:
    """Answers ``/<status>`` with that status, a session cookie and per-session headers."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        while (await receive()).get("more_body"):
            pass
        self.calls += 1
        headers = [
            (b"content-type", b"application/json"),
            (b"set-cookie", f"session=secret-{self.calls}".encode()),
            (b"www-authenticate", b"Bearer"),
            (b"x-call", str(self.calls).encode()),
        ]
        status = int(scope["path"].strip("/") or 200)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": b'{"done": true}'})


@pytest.mark.parametrize("status", [401, 403, 408, 409, 425, 429])
def test_statuses_that_are_not_the_outcome_are_never_stored(
    store: IdempotencyStore, status: int
) -> None:
    app = StatusApp()
    request = client_for(IdempotencyMiddleware(app, store=store, single_tenant=True))
    first = request("POST", f"/{status}", "k")
    retry = request("POST", f"/{status}", "k")
    assert first.status_code == retry.status_code == status
    assert "idempotent-replayed" not in retry.headers and app.calls == 2


def test_retryable_statuses_are_configurable_but_401_and_403_never_stored(
    store: IdempotencyStore,
) -> None:
    app = StatusApp()
    middleware = IdempotencyMiddleware(
        app, store=store, single_tenant=True, retryable_statuses=(404,)
    )
    request = client_for(middleware)
    for status, stored in ((404, False), (429, True), (401, False), (403, False)):
        request("POST", f"/{status}", f"k{status}")
        retry = request("POST", f"/{status}", f"k{status}")
        assert ("idempotent-replayed" in retry.headers) is stored, status


def test_session_headers_are_never_stored_or_replayed(store: IdempotencyStore) -> None:
    request = client_for(IdempotencyMiddleware(StatusApp(), store=store, single_tenant=True))
    first = request("POST", "/201", "k")
    assert first.headers["set-cookie"] == "session=secret-1"  # the live answer is whole
    replay = request("POST", "/201", "k")
    assert replay.headers["idempotent-replayed"] == "true"
    assert "set-cookie" not in replay.headers and "www-authenticate" not in replay.headers
    assert replay.headers["x-call"] == "1" and replay.json() == {"done": True}


def test_json_bodies_are_fingerprinted_as_canonical_json(store: IdempotencyStore) -> None:
    app = App()
    request = client_for(IdempotencyMiddleware(app, store=store, single_tenant=True))
    json_type = {"content-type": "application/json; charset=utf-8"}
    request("POST", "/t", "k1", content=b'{"a": 1, "b": [1, 2]}', headers=json_type)
    same = request("POST", "/t", "k1", content=b'{\n  "b": [1,2],\n  "a": 1\n}', headers=json_type)
    assert same.headers["idempotent-replayed"] == "true"
    problem(
        request("POST", "/t", "k1", content=b'{"a": 2, "b": [1, 2]}', headers=json_type),
        422,
        "idempotency_key_reused",
    )
    # Other media types are their bytes: spacing makes another request.
    text_type = {"content-type": "text/plain"}
    request("POST", "/t", "k2", content=b"a b", headers=text_type)
    problem(
        request("POST", "/t", "k2", content=b"a  b", headers=text_type),
        422,
        "idempotency_key_reused",
    )
    # Not JSON after all: the bytes decide, and the same bytes replay.
    request("POST", "/t", "k3", content=b"{oops", headers=json_type)
    again = request("POST", "/t", "k3", content=b"{oops", headers=json_type)
    assert again.headers["idempotent-replayed"] == "true"
    assert app.calls == {"/t": 3}


def test_a_key_scope_is_required_unless_single_tenant(store: IdempotencyStore) -> None:
    from durably.errors import ConfigError

    with pytest.raises(ConfigError, match="scope_of"):
        IdempotencyMiddleware(App(), store=store)
    with pytest.raises(ConfigError, match="not both"):
        IdempotencyMiddleware(App(), store=store, scope_of=lambda s: "", single_tenant=True)


def test_replays_stay_within_a_tenant_and_anonymous_requests_pass_through(
    store: IdempotencyStore,
) -> None:
    app = App()

    async def tenant(scope: Any) -> str | None:  # async, as a lookup may be
        token = dict(scope["headers"]).get(b"authorization", b"").decode()
        return {"Bearer a": "alice", "Bearer b": "bob"}.get(token)

    request = client_for(IdempotencyMiddleware(app, store=store, scope_of=tenant))
    alice = request("POST", "/t", "k", content=b"x", headers={"authorization": "Bearer a"})
    bob = request("POST", "/t", "k", content=b"x", headers={"authorization": "Bearer b"})
    anonymous = request("POST", "/t", "k", content=b"x")
    assert "idempotent-replayed" not in bob.headers and bob.json()["n"] == 2
    assert "idempotent-replayed" not in anonymous.headers and anonymous.json()["n"] == 3
    replay = request("POST", "/t", "k", content=b"x", headers={"authorization": "Bearer a"})
    assert replay.headers["idempotent-replayed"] == "true" and replay.json() == alice.json()
    assert store.get("k", scope="alice") is not None and store.get("k") is None


class ServerDied(Exception):
    """The connection broke right after the last chunk left (the process died)."""


@pytest.mark.parametrize("path", ["/tickets", "/stream"])
def test_the_response_is_stored_before_its_last_chunk_is_sent(
    store: IdempotencyStore, path: str
) -> None:
    """A raw ASGI harness that looks at the store when the last chunk reaches the server's
    send: the outcome must be stored by then. Then the server "dies" right there; the
    client, which saw the whole response, retries and must get the replay, never a second
    execution."""
    app = App()
    middleware = IdempotencyMiddleware(app, store=store, single_tenant=True)
    stored_at_last_chunk: list[object] = []

    def call(die_after_last_chunk: bool) -> list[Message]:
        messages: list[Message] = []
        request = [{"type": "http.request", "body": b"abc", "more_body": False}]

        async def receive() -> Message:
            return request.pop() if request else {"type": "http.disconnect"}

        async def send(message: Message) -> None:
            messages.append(message)
            last = message["type"] == "http.response.body" and not message.get("more_body")
            if last and die_after_last_chunk:
                stored_at_last_chunk.append(store.get("k1"))
                raise ServerDied

        scope = {
            "type": "http",
            "method": "POST",
            "path": path,
            "query_string": b"",
            "headers": [(b"idempotency-key", b"k1")],
        }
        try:
            asyncio.run(middleware(scope, receive, send))
        except ServerDied:
            pass
        return messages

    sent = call(die_after_last_chunk=True)
    [record] = stored_at_last_chunk
    assert record is not None, "the last chunk left before the response was stored"
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    assert json.loads(body) == {"n": 1, "echo": "abc"}
    retry = call(die_after_last_chunk=False)
    assert (b"idempotent-replayed", b"true") in retry[0]["headers"]
    assert b"".join(m.get("body", b"") for m in retry[1:]) == body
    assert app.calls == {path: 1}
