"""Pure ASGI middleware that honours the ``Idempotency-Key`` header.

It needs no web framework (Starlette, FastAPI and any other ASGI app work alike) and streams
the response through instead of buffering it, keeping a copy to store. The store is
synchronous, so its calls run in a worker thread and never block the event loop.

Per request with a key on a covered method (POST and PATCH by default):

==========================================  ===============================================
situation                                   response
==========================================  ===============================================
first request                               the app's response, stored (unless it is not
                                            the request's outcome: 5xx, 401, 403, 408,
                                            409, 425, 429)
retry, same key and same request            the stored response + ``Idempotent-Replayed``
same key, different method/path/body        422 problem
first request still running                 409 problem with ``Retry-After``
key missing where required, or malformed    400 problem
no tenant (``scope_of`` returned None)      passed to the app, nothing stored or replayed
==========================================  ===============================================

Keys are scoped by tenant: ``scope_of`` maps each request to the identity it was
authenticated as, and a stored response is only ever replayed within that scope. Per-session
headers (``Set-Cookie`` and the others in :data:`PER_SESSION_HEADERS`) and hop-by-hop
headers are never stored, so a replay never hands out anyone's session.

Problems are RFC 9457 ``application/problem+json`` bodies with a ``code`` member that stays
stable (``idempotency_key_missing``, ``idempotency_key_invalid``, ``idempotency_key_reused``,
``idempotency_key_in_flight``, ``request_too_large``, ``response_not_replayable``).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import inspect
import json
import logging
import threading
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from http import HTTPStatus
from typing import Any

from durably.errors import (
    ConfigError,
    DurablyError,
    IdempotencyKeyInFlight,
    IdempotencyKeyReused,
    SerializationError,
)
from durably.idempotency.store import (
    Claim,
    IdempotencyRecord,
    IdempotencyStore,
    InvalidIdempotencyKey,
    canonical_json,
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
# Statuses that say the request has no outcome yet (try again later), so storing them
# would answer every retry within the window with the same refusal. Configurable.
RETRYABLE_STATUSES_DEFAULT = frozenset({408, 409, 425, 429})
# Statuses about the caller's credentials, not the request: never stored, whatever the
# options, so a response to missing or wrong credentials is never replayed to anyone.
AUTH_STATUSES = frozenset({401, 403})
# Response headers that belong to one session or connection: never stored or replayed.
PER_SESSION_HEADERS = frozenset(
    {
        "set-cookie",
        "set-cookie2",
        "www-authenticate",
        "proxy-authenticate",
        "authentication-info",
        "proxy-authentication-info",
        "clear-site-data",
    }
)
HOP_BY_HOP_HEADERS = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
_JSON_TYPES = ("application/json",)
log = logging.getLogger("durably.idempotency")
# Returned by _read_body when the client went away before sending the whole body.
_DISCONNECTED = b"\x00disconnected"


ScopeOf = Callable[[Scope], "str | Awaitable[str | None] | None"]


class IdempotencyMiddleware:
    """Make POST and PATCH requests carrying an ``Idempotency-Key`` header run once.

    ``store`` keeps the outcomes (its ``ttl_s`` is the key window, its ``lease_s`` bounds how
    long a request whose server died blocks the key). ``scope_of(scope)`` returns the
    tenant the request was authenticated as (sync or async): keys, stored responses and
    replays never cross tenants. It must come from authenticated identity (e.g. an
    authentication middleware's ``scope["user"]``), never from a header the client picks;
    returning None (not authenticated) passes the request to the app untouched, nothing
    stored. Without ``scope_of`` the middleware refuses to start unless ``single_tenant``
    declares that every caller is the same party. ``methods`` are the covered methods;
    ``require_key`` answers 400 when a covered request has no key. ``store_server_errors``
    also stores 5xx responses (see docs/idempotency.md); ``retryable_statuses`` (default
    408, 409, 425, 429) are never stored, nor are 401 and 403. Requests larger than
    ``request_bytes_max`` get 413. A response larger than ``response_bytes_max`` is sent,
    and its key then answers retries with a 500 ``response_not_replayable`` problem: the
    work ran and is not run again. ``problem_type_base``, when set, prefixes each problem's
    ``code`` to form its ``type`` URI (otherwise ``about:blank``).
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        store: IdempotencyStore,
        scope_of: ScopeOf | None = None,
        single_tenant: bool = False,
        methods: Iterable[str] = ("POST", "PATCH"),
        require_key: bool = False,
        store_server_errors: bool = False,
        retryable_statuses: Iterable[int] = RETRYABLE_STATUSES_DEFAULT,
        request_bytes_max: int = REQUEST_BYTES_MAX_DEFAULT,
        response_bytes_max: int = RESPONSE_BYTES_MAX_DEFAULT,
        problem_type_base: str | None = None,
    ) -> None:
        if scope_of is None and not single_tenant:
            raise ConfigError(
                "IdempotencyMiddleware needs scope_of=: a function returning the tenant each"
                " request was authenticated as (e.g. lambda scope: scope['user'].identity"
                " behind an authentication middleware), so one client's key never replays"
                " another client's response. If every caller is the same party, pass"
                " single_tenant=True instead"
            )
        if scope_of is not None and single_tenant:
            raise ConfigError("pass scope_of= or single_tenant=True, not both")
        if request_bytes_max < 0 or response_bytes_max < 0:
            raise ConfigError("request_bytes_max and response_bytes_max must be >= 0")
        self.app = app
        self.store = store
        self.scope_of = scope_of
        self.methods = frozenset(m.upper() for m in methods)
        self.require_key = require_key
        self.store_server_errors = store_server_errors
        self.retryable_statuses = frozenset(int(s) for s in retryable_statuses)
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
        tenant = await self._tenant(scope)
        if tenant is None:
            # Not authenticated: no key space to look in. The app answers (typically 401),
            # and nothing about this request is stored or replayed.
            await self.app(scope, receive, send)
            return
        try:
            key = _parse_key(values)
            key_scope = check_key(tenant, "scope", allow_empty=True)
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
            claimed = await self._begin(key, fingerprint, key_scope)
        except IdempotencyKeyReused as exc:
            await self._problem(send, 422, "idempotency_key_reused", str(exc))
            return
        except IdempotencyKeyInFlight as exc:
            await self._problem(
                send, 409, "idempotency_key_in_flight", str(exc), [(b"retry-after", b"1")]
            )
            return
        if isinstance(claimed, IdempotencyRecord):
            await self._replay(claimed, send)
            return
        await self._run(scope, body, receive, send, claimed)

    async def _tenant(self, scope: Scope) -> str | None:
        if self.scope_of is None:
            return ""  # single_tenant: one key space
        tenant = self.scope_of(scope)
        if inspect.isawaitable(tenant):
            tenant = await tenant
        if tenant is not None and not isinstance(tenant, str):
            raise ConfigError(
                f"scope_of must return a string (the authenticated tenant) or None, got"
                f" {type(tenant).__name__}"
            )
        return tenant

    async def _begin(self, key: str, fingerprint: str, key_scope: str) -> Claim | IdempotencyRecord:
        """``store.begin`` in a worker thread, never leaving a claim behind when cancelled.

        A cancelled request (the client went away, a timeout around the app) stops waiting,
        but the thread goes on and may still commit a claim; nobody would complete or
        release it, and the heartbeat would keep it alive: every retry would get 409. So
        when the wait is cancelled, the claim is released as soon as it exists.
        """
        job = asyncio.ensure_future(
            asyncio.to_thread(self.store.begin, key, fingerprint, scope=key_scope)
        )
        try:
            return await asyncio.shield(job)
        except asyncio.CancelledError:
            job.add_done_callback(self._release_abandoned)
            raise

    def _release_abandoned(self, job: asyncio.Future[Claim | IdempotencyRecord]) -> None:
        if job.cancelled() or job.exception() is not None:
            return
        claimed = job.result()
        if isinstance(claimed, Claim):
            # Off the event loop: release is a blocking database call.
            threading.Thread(
                target=self._release_quietly, args=(claimed,), daemon=True, name="durably-release"
            ).start()

    def _release_quietly(self, claim: Claim) -> None:
        try:
            self.store.release(claim)
        except Exception:
            # The heartbeat no longer renews it, so the key frees itself after lease_s.
            log.warning("could not release idempotency key %r", claim.key, exc_info=True)

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
                await asyncio.to_thread(self._release_quietly, claim)

    def _stores(self, status: int) -> bool:
        """Whether a response with ``status`` is the request's outcome, to be stored."""
        if status in AUTH_STATUSES or status in self.retryable_statuses:
            return False
        return status < 500 or self.store_server_errors

    async def _finish(self, claim: Claim, recorder: _Recorder) -> None:
        status = recorder.status
        if not self._stores(status):
            await asyncio.to_thread(self._release_quietly, claim)
            return
        if recorder.overflow:
            # The work ran; a retry must not run it again. Keep what it answered, without
            # the body, so retries get a clear refusal instead of a second effect.
            stored: dict[str, Any] = {"status": status, "body_bytes": recorder.size}
        else:
            stored = {
                "status": status,
                "headers": [
                    [k.decode("latin-1"), v.decode("latin-1")] for k, v in _storable(recorder)
                ],
                "body_b64": base64.b64encode(bytes(recorder.body)).decode("ascii"),
            }
        try:
            await asyncio.to_thread(self.store.complete, claim, stored)
        except DurablyError as exc:
            # Lease lost (another request took the key over and its outcome will be the
            # stored one), or the store failed (complete() released the key). Either way
            # this response still goes to its client.
            log.warning("idempotency key %r: outcome not stored: %s", claim.key, exc)

    async def _replay(self, record: IdempotencyRecord, send: Send) -> None:
        """Send a stored response again, marked with ``Idempotent-Replayed: true``."""
        stored = record.result
        if "body_b64" not in stored:
            await self._problem(
                send,
                500,
                "response_not_replayable",
                f"the request with this idempotency key already ran and answered status"
                f" {stored['status']}, but its response ({stored['body_bytes']} bytes) was"
                f" larger than this service keeps ({self.response_bytes_max} bytes), so it"
                " cannot be sent again; the request is not run twice. Look its result up"
                " another way, or send a new request with a new key",
                [REPLAYED_HEADER],
            )
            return
        headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in stored["headers"]]
        headers.append(REPLAYED_HEADER)
        body = base64.b64decode(stored["body_b64"])
        await send({"type": "http.response.start", "status": stored["status"], "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})

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
    """Return the request's fingerprint: method, path, query string and a body digest.

    A JSON body (``application/json`` or ``+json``) is digested as canonical JSON (sorted
    keys, no whitespace), so the same document sent with other key order or spacing is
    the same request; any other body (or JSON that does not parse) by its raw bytes.
    """
    query = scope.get("query_string", b"").decode("latin-1")
    target = scope["path"] + (f"?{query}" if query else "")
    text = f"{scope['method'].upper()}\n{target}\n{_body_digest(scope, body)}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _body_digest(scope: Scope, body: bytes) -> str:
    if _is_json(scope):
        try:
            canonical = canonical_json(json.loads(body))
        except (ValueError, RecursionError, SerializationError):
            pass  # not JSON after all (or NaN): the bytes are the request
        else:
            return "json:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()
    return hashlib.sha256(body).hexdigest()


def _is_json(scope: Scope) -> bool:
    for name, value in scope.get("headers", ()):
        if name.lower() == b"content-type":
            media = value.decode("latin-1").split(";", 1)[0].strip().lower()
            return media in _JSON_TYPES or media.endswith("+json")
    return False


def _storable(recorder: _Recorder) -> list[tuple[bytes, bytes]]:
    """The response headers worth replaying: none of one session's or connection's."""
    dropped = PER_SESSION_HEADERS | HOP_BY_HOP_HEADERS
    return [(k, v) for k, v in recorder.headers if k.decode("latin-1").lower() not in dropped]


class _Recorder:
    """Keeps a copy of the response as it streams past, up to a byte limit."""

    def __init__(self, bytes_max: int) -> None:
        self.bytes_max = bytes_max
        self.status = 500
        self.headers: list[tuple[bytes, bytes]] = []
        self.body = bytearray()
        self.size = 0
        self.overflow = False
        self.complete = False

    def see(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = int(message["status"])
            self.headers = [(bytes(k), bytes(v)) for k, v in message.get("headers", [])]
        elif message["type"] == "http.response.body":
            chunk = message.get("body", b"")
            self.size += len(chunk)
            if self.size > self.bytes_max:
                self.overflow = True
                self.body = bytearray()  # nothing of it is kept
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
