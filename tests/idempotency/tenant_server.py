"""A multi-tenant service behind a real uvicorn server, for the tenancy and cancellation
tests.

Bearer tokens authenticate two clients (``alice-token``, ``bob-token``) through
Starlette's AuthenticationMiddleware; the idempotency middleware sits inside it and scopes
keys by the authenticated user. ``POST /notes`` answers 401 to anonymous callers; for a
client it appends one line per effect to ``--effects``, and answers with that client's
secret and a session cookie. The outermost layer cancels a request whose client went away
(as frameworks that cancel handlers on disconnect do) and notes it in ``--cancelled``.
The server binds port 0 and writes the port it got to ``--port-file``.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

from idem_helpers import serve
from starlette.applications import Starlette
from starlette.authentication import AuthCredentials, AuthenticationBackend, SimpleUser
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from durably.idempotency import IdempotencyMiddleware, IdempotencyStore, migrate

TOKENS = {"alice-token": "alice", "bob-token": "bob"}


class TokenAuth(AuthenticationBackend):
    """``Authorization: Bearer <token>`` for the two known clients; anyone else is anonymous."""

    async def authenticate(self, conn: HTTPConnection) -> tuple[AuthCredentials, SimpleUser] | None:
        scheme, _, token = conn.headers.get("authorization", "").partition(" ")
        user = TOKENS.get(token) if scheme.lower() == "bearer" else None
        return (AuthCredentials(["authenticated"]), SimpleUser(user)) if user else None


def tenant(scope: Any) -> str | None:
    """The key scope: the authenticated user, never anything the client chose."""
    user = scope["user"]
    return str(user.identity) if user.is_authenticated else None


class CancelOnDisconnect:
    """Cancel the request's handling when its client disconnects."""

    def __init__(self, app: Any, marker: Path) -> None:
        self.app = app
        self.marker = marker

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        queue: asyncio.Queue[Any] = asyncio.Queue()

        async def pump() -> None:
            while True:
                message = await receive()
                await queue.put(message)
                if message["type"] == "http.disconnect":
                    return

        handler = asyncio.ensure_future(self.app(scope, queue.get, send))
        listener = asyncio.ensure_future(pump())
        await asyncio.wait({handler, listener}, return_when=asyncio.FIRST_COMPLETED)
        if not handler.done():
            handler.cancel()
            self.marker.write_text(scope["path"])
        try:
            await handler
        except asyncio.CancelledError:
            pass
        listener.cancel()


def create_app(effects: Path, store: IdempotencyStore, cancelled: Path) -> Any:
    async def create_note(request: Request) -> Response:
        if not request.user.is_authenticated:
            return JSONResponse({"error": "sign in"}, status_code=401)
        owner = request.user.identity
        note = await request.json()
        with effects.open("a") as f:
            f.write(f"{owner}:{note['title']}\n")
        response = JSONResponse({"owner": owner, "secret": f"secret-of-{owner}"}, 201)
        response.set_cookie("session", f"session-of-{owner}")
        return response

    async def health(request: Request) -> Response:
        return JSONResponse({"ok": True})

    app = Starlette(
        routes=[
            Route("/notes", create_note, methods=["POST"]),
            Route("/healthz", health, methods=["GET"]),
        ],
        middleware=[
            Middleware(AuthenticationMiddleware, backend=TokenAuth()),
            Middleware(IdempotencyMiddleware, store=store, scope_of=tenant),
        ],
    )
    return CancelOnDisconnect(app, cancelled)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--idem-url", required=True)
    parser.add_argument("--effects", required=True)
    parser.add_argument("--cancelled", required=True)
    parser.add_argument("--port-file", required=True)
    parser.add_argument("--lease-s", type=float, default=1.0)
    args = parser.parse_args()
    migrate(args.idem_url)
    store = IdempotencyStore(args.idem_url, lease_s=args.lease_s, busy_timeout_s=60)
    app = create_app(Path(args.effects), store, Path(args.cancelled))
    serve(app, args.port_file)


if __name__ == "__main__":
    main()
