"""The dashboard's ASGI app: :func:`create_app` wires the pages, the actions, the live
stream and the security checks of :mod:`.auth` around one engine."""

from __future__ import annotations

from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from . import actions, live, pages
from .auth import CSRF_COOKIE, SESSION_COOKIE, Security, strip_token
from .render import Renderer, new_csrf

STATIC = Path(__file__).parent / "static"


class Guard:
    """ASGI middleware: the Host check, then a valid token, session cookie or Bearer
    header on every request (see :mod:`.auth`). It puts the approver's name and how the
    request authenticated into ``scope["state"]``."""

    def __init__(self, app: ASGIApp, security: Security) -> None:
        self.app = app
        self.security = security

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        sec = self.security
        if not sec.check_host(headers.get("host")):
            resp: Response = PlainTextResponse(
                "this server does not answer for that Host header (durably ui checks it so a"
                " page on another site cannot reach it through DNS rebinding)",
                status_code=403,
            )
            await resp(scope, receive, send)
            return
        state = scope.setdefault("state", {})
        state["bearer"] = False
        if not sec.required:
            state["user"] = sec.user
            await self.app(scope, receive, send)
            return
        cookies = _cookies(headers.get("cookie", ""))
        auth = headers.get("authorization", "")
        if auth.lower().startswith("bearer "):
            ok, name = sec.token_name(auth[7:].strip())
            if ok:
                state["user"], state["bearer"] = sec.approver(name), True
                await self.app(scope, receive, send)
                return
        ok, name = sec.session(cookies.get(SESSION_COOKIE, ""))
        if ok:
            state["user"] = sec.approver(name)
            await self.app(scope, receive, send)
            return
        query = scope.get("query_string", b"").decode("latin-1")
        token = _query_token(query)
        if token is not None and scope["method"] == "GET":
            ok, name = sec.token_name(token)
            if ok:
                await _login(scope, receive, send, sec.new_session(name), query)
                return
        resp = HTMLResponse(_REFUSED, status_code=403)
        await resp(scope, receive, send)


_REFUSED = (
    "<!doctype html><title>durably ui: token needed</title><p>This dashboard needs its"
    " token. Open the URL <code>durably ui</code> printed when it started (it carries"
    " <code>?token=...</code>), or send <code>Authorization: Bearer TOKEN</code>.</p>"
)


def _cookies(header: str) -> dict[str, str]:
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(header)
    except Exception:  # a malformed Cookie header is no session, never a 500
        return {}
    return {k: m.value for k, m in jar.items()}


def _query_token(query: str) -> str | None:
    from urllib.parse import parse_qs

    values = parse_qs(query).get("token")
    return values[0] if values else None


async def _login(scope: Scope, receive: Receive, send: Send, sid: str, query: str) -> None:
    """Set the session cookie and reload the page without the token in its address.

    A small page that reloads itself, not a redirect: the reload is a navigation of this
    site, so the browser sends the SameSite=Strict cookie with it even when the printed
    URL was opened from another application.
    """
    # Only a path of this site, quoted: a browser reads "//host", "/\\host" and
    # "/<tab>/host" (it drops tabs and newlines) as another site's address.
    from urllib.parse import quote

    path = quote(scope["path"], safe="/-._~!$&'()*+,;=:@")
    if path.startswith("//") or not path.startswith("/"):
        path = "/runs"
    clean = path + (f"?{q}" if (q := strip_token(query)) else "")
    from html import escape

    body = (
        f'<!doctype html><meta http-equiv="refresh" content="0;url={escape(clean)}">'
        f'<title>durably ui</title><a href="{escape(clean)}">continue</a>'
    )
    resp = HTMLResponse(body)
    resp.set_cookie(SESSION_COOKIE, sid, httponly=True, samesite="strict", path="/")
    await resp(scope, receive, send)


class CsrfCookie:
    """ASGI middleware: give every browser a CSRF cookie (double-submit; see
    :mod:`.auth`) the first time it gets a page, and tell the templates its value."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        current = _cookies(headers.get("cookie", "")).get(CSRF_COOKIE)
        state = scope.setdefault("state", {})
        state["csrf_cookie"] = current
        if current:
            state["csrf"] = current
            await self.app(scope, receive, send)
            return
        fresh = new_csrf()
        state["csrf"] = fresh

        async def send_with_cookie(message: Any) -> None:
            if message["type"] == "http.response.start":
                cookie = f"{CSRF_COOKIE}={fresh}; Path=/; SameSite=Strict"
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (b"set-cookie", cookie.encode())]
            await send(message)

        await self.app(scope, receive, send_with_cookie)


def create_app(engine: Any, security: Security, *, db_label: str = "") -> Starlette:
    """The dashboard for ``engine`` behind ``security`` (see :func:`.auth.security_for`).

    ``db_label`` is the journal's URL with its password hidden, shown in the page title.
    The engine is used through its public methods only; the caller closes it.
    """
    renderer = Renderer(db_label)
    routes = [
        Route("/", lambda request: RedirectResponse("/runs", status_code=303)),
        *pages.routes(engine, renderer),
        *actions.routes(engine, renderer),
        *live.routes(engine, renderer),
        Mount("/static", app=StaticFiles(directory=STATIC), name="static"),
    ]
    app = Starlette(routes=routes)
    app.add_middleware(CsrfCookie)
    app.add_middleware(Guard, security=security)
    return app
