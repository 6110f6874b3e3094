"""Pure ASGI middleware that honours the ``Idempotency-Key`` header.

It needs no web framework (Starlette, FastAPI and any other ASGI app work alike) and streams
the response through instead of buffering it, keeping a copy to store. The store is
synchronous, so its calls run in a worker thread and never block the event loop.

Per request with a key on a covered method (POST and PATCH by default):

==========================================  ===============================================
situation                                   response
==========================================  ===============================================
first request                               the app's response, stored (unless 5xx)
retry, same key and same request            the stored response + ``Idempotent-Replayed``
same key, different method/path/body        422 problem
first request still running                 409 problem with ``Retry-After``
key missing where required, or malformed    400 problem
==========================================  ===============================================

Problems are RFC 9457 ``application/problem+json`` bodies with a ``code`` member that stays
stable (``idempotency_key_missing``, ``idempotency_key_invalid``, ``idempotency_key_reused``,
``idempotency_key_in_flight``, ``request_too_large``).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from http import HTTPStatus
from typing import Any

from durably.errors import IdempotencyKeyInFlight, IdempotencyKeyReused, SerializationError
from durably.idempotency.store import (
    Claim,
    IdempotencyLeaseLost,
    IdempotencyRecord,
    IdempotencyStore,
    InvalidIdempotencyKey,
    check_key,
)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

HEADER = b"idempotency-key"
REPLAYED_HEADER = (b"idempotent-replayed", b"true")
REQUEST_BYTES_MAX_DEFAULT = 1024 * 1024
RESPONSE_BYTES_MAX_DEFAULT = 512 * 1024
# Returned by _read_body when the client went away before sending the whole body.
_DISCONNECTED = b"\x00disconnected"


class IdempotencyMiddleware:
    """Make POST and PATCH requests carrying an ``Idempotency-Key`` header run once.

    ``store`` keeps the outcomes (its ``ttl_s`` is the key window, its ``lease_s`` bounds how
    long a request whose server died blocks the key). ``methods`` are the covered methods;
    ``require_key`` answers 400 when a covered request has no key (otherwise it passes
    through unprotected). ``store_server_errors`` also stores 5xx responses (see
    docs/idempotency.md). ``scope_of`` maps the ASGI scope to a key namespace (e.g. the
    authenticated client) so clients cannot see each other's keys. Requests larger than
    ``request_bytes_max`` get 413; responses larger than ``response_bytes_max`` are sent but
    not stored. ``problem_type_base``, when set, prefixes each problem's ``code`` to form
    its ``type`` URI (otherwise ``about:blank``).
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        store: IdempotencyStore,
        methods: Iterable[str] = ("POST", "PATCH"),
        require_key: bool = False,
        store_server_errors: bool = False,
        scope_of: Callable[[Scope], str] | None = None,
        request_bytes_max: int = REQUEST_BYTES_MAX_DEFAULT,
        response_bytes_max: int = RESPONSE_BYTES_MAX_DEFAULT,
        problem_type_base: str | None = None,
    ) -> None:
        self.app = app
        self.store = store
        self.methods = frozenset(m.upper() for m in methods)
        self.require_key = require_key
        self.store_server_errors = store_server_errors
        self.scope_of = scope_of
        self.request_bytes_max = request_bytes_max
        self.response_bytes_max = response_bytes_max
        self.problem_type_base = problem_type_base

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Handle one ASGI call; only covered HTTP methods are looked at."""
        if scope["type"] != "http" or scope["method"].upper() not in self.methods:
            await self.app(scope, receive, send)
            return
        values = [v for k, v in scope["headers"] if k.lower() == HEADER]
        if not values:
            if self.require_key:
                await self._problem(
                    send,
                    400,
                    "idempotency_key_missing",
                    f"{scope['method']} {scope['path']} requires an Idempotency-Key header;"
                    " send a unique value (e.g. a UUID) and reuse it when retrying",
                )
                return
            await self.app(scope, receive, send)
            return
        try:
            key = _parse_key(values)
            key_scope = check_key(
                self.scope_of(scope) if self.scope_of else "", "scope", allow_empty=True
            )
        except InvalidIdempotencyKey as exc:
            await self._problem(send, 400, "idempotency_key_invalid", str(exc))
            return
        body = await _read_body(receive, self.request_bytes_max)
        if body is _DISCONNECTED:
            return  # nobody is waiting for an answer, and a partial body must not run
        if body is None:
            await self._problem(
                send,
                413,
                "request_too_large",
                f"the request body is larger than {self.request_bytes_max} bytes, the most"
                " this service reads for an idempotent request",
            )
            return
        fingerprint = request_fingerprint(scope, body)
        try:
            claimed = await asyncio.to_thread(self.store.begin, key, fingerprint, scope=key_scope)
        except IdempotencyKeyReused as exc:
            await self._problem(send, 422, "idempotency_key_reused", str(exc))
            return
        except IdempotencyKeyInFlight as exc:
            await self._problem(
                send, 409, "idempotency_key_in_flight", str(exc), [(b"retry-after", b"1")]
            )
            return
        if isinstance(claimed, IdempotencyRecord):
            await _replay(claimed, send)
            return
        await self._run(scope, body, receive, send, claimed)

    async def _run(
        self, scope: Scope, body: bytes, receive: Receive, send: Send, claim: Claim
    ) -> None:
        """Run the app on the buffered body, streaming its response and storing a copy."""
        recorder = _Recorder(self.response_bytes_max)
        finished = False
        pending: bytes | None = body

        async def replay_receive() -> Message:
            nonlocal pending
            if pending is not None:
                chunk, pending = pending, None
                return {"type": "http.request", "body": chunk, "more_body": False}
            return await receive()  # later calls wait for the disconnect, as usual

        async def recording_send(message: Message) -> None:
            nonlocal finished
            recorder.see(message)
            if recorder.complete and not finished:
                finished = True
                # Store before the last chunk leaves: a crash after it would make the
                # client's retry run the work again, a crash before only replays it.
                await self._finish(claim, recorder)
            await send(message)

        try:
            await self.app(scope, replay_receive, recording_send)
        finally:
            if not finished:
                # The app raised or ended without a response: a server error, not stored.
                await asyncio.to_thread(self.store.release, claim)

    async def _finish(self, claim: Claim, recorder: _Recorder) -> None:
        status = recorder.status
        storable = recorder.overflow is False and (status < 500 or self.store_server_errors)
        if not storable:
            await asyncio.to_thread(self.store.release, claim)
            return
        stored = {
            "status": status,
            "headers": [[k.decode("latin-1"), v.decode("latin-1")] for k, v in recorder.headers],
            "body_b64": base64.b64encode(bytes(recorder.body)).decode("ascii"),
        }
        try:
            await asyncio.to_thread(self.store.complete, claim, stored)
        except IdempotencyLeaseLost:
            # Another request took the key over (this one outlived its lease); its outcome
            # will be the stored one. This response still goes to its client.
            pass
        except SerializationError:
            # Too large to store once encoded (complete() has released the key): the client
            # still gets this response, and a retry runs again, as for an unstored 5xx.
            pass

    async def _problem(
        self,
        send: Send,
        status: int,
        code: str,
        detail: str,
        extra_headers: list[tuple[bytes, bytes]] | None = None,
    ) -> None:
        problem = {
            "type": f"{self.problem_type_base}{code}" if self.problem_type_base else "about:blank",
            "title": HTTPStatus(status).phrase,
            "status": status,
            "detail": detail,
            "code": code,
        }
        body = json.dumps(problem).encode("utf-8")
        headers = [
            (b"content-type", b"application/problem+json"),
            (b"content-length", str(len(body)).encode("ascii")),
            *(extra_headers or []),
        ]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})


def request_fingerprint(scope: Scope, body: bytes) -> str:
    """Return the request's fingerprint: method, path, query string and a body digest."""
    query = scope.get("query_string", b"").decode("latin-1")
    target = scope["path"] + (f"?{query}" if query else "")
    text = f"{scope['method'].upper()}\n{target}\n{hashlib.sha256(body).hexdigest()}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class _Recorder:
    """Keeps a copy of the response as it streams past, up to a byte limit."""

    def __init__(self, bytes_max: int) -> None:
        self.bytes_max = bytes_max
        self.status = 500
        self.headers: list[tuple[bytes, bytes]] = []
        self.body = bytearray()
        self.overflow = False
        self.complete = False

    def see(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = int(message["status"])
            self.headers = [(bytes(k), bytes(v)) for k, v in message.get("headers", [])]
        elif message["type"] == "http.response.body":
            chunk = message.get("body", b"")
            if len(self.body) + len(chunk) > self.bytes_max:
                self.overflow = True
            elif not self.overflow:
                self.body.extend(chunk)
            self.complete = not message.get("more_body", False)


def _parse_key(values: list[bytes]) -> str:
    """Return the key from the header value, accepting the draft's quoted sf-string form."""
    if len(values) > 1:
        raise InvalidIdempotencyKey(
            "the request has several Idempotency-Key headers; send exactly one"
        )
    try:
        text = values[0].decode("ascii").strip()
    except UnicodeDecodeError as exc:
        raise InvalidIdempotencyKey("the Idempotency-Key header must be ASCII") from exc
    if len(text) >= 2 and text[0] == text[-1] == '"':
        text = text[1:-1]
    return check_key(text, "Idempotency-Key")


async def _read_body(receive: Receive, bytes_max: int) -> bytes | None:
    """Read the whole request body (the fingerprint needs it), or None past ``bytes_max``.

    Returns the ``_DISCONNECTED`` object itself when the client left before the end.
    """
    chunks = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return _DISCONNECTED
        chunks.extend(message.get("body", b""))
        if len(chunks) > bytes_max:
            return None
        if not message.get("more_body", False):
            break
    return bytes(chunks)


async def _replay(record: IdempotencyRecord, send: Send) -> None:
    """Send a stored response again, marked with ``Idempotent-Replayed: true``."""
    stored = record.result
    headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in stored["headers"]]
    headers.append(REPLAYED_HEADER)
    body = base64.b64decode(stored["body_b64"])
    await send({"type": "http.response.start", "status": stored["status"], "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})
