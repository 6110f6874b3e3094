"""Live updates: the run's event stream as Server-Sent Events, and the part of the run
page the browser swaps in when an event says the run changed.

``GET /run/events?id=RUN`` follows ``engine.follow`` from the cursor in the
``Last-Event-ID`` header (or ``?after=``), so a browser that reconnects resumes without
a gap or a repeat; each SSE ``id`` is the event's cursor. The stream ends with an
``end`` event once the run is finished and every event is out.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from durably import DurablyError, RunNotFound

from . import pages
from .render import Renderer

KEEPALIVE_S = 15.0
"""Seconds between comment lines on a quiet stream (keeps proxies from closing it)."""
SSE_POLL_S = 0.2
"""How often a follower on SQLite looks for new events."""


def _cursor(request: Request) -> int | None:
    raw = request.headers.get("last-event-id") or request.query_params.get("after") or "0"
    try:
        value = int(raw)
    except ValueError:
        return None
    return value if value >= 0 else None


def _plain(text: str, status: int) -> Response:
    """An error as plain text a browser never sniffs as HTML (it may quote the run id)."""
    return PlainTextResponse(text, status, headers={"X-Content-Type-Options": "nosniff"})


def sse_event(event: Any) -> str:
    """One event as an SSE message: ``id`` its cursor, ``data`` its JSON."""
    data = {
        "cursor": event.cursor,
        "kind": event.kind,
        "position": event.position,
        "at": event.at,
        "data": event.data,
    }
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    # JSON has no raw newlines, so one data line carries it; \u2028 is fine in SSE.
    return f"id: {event.cursor}\nevent: journal\ndata: {text}\n\n"


async def _stream(follow: Any) -> AsyncIterator[str]:
    it = follow.__aiter__()
    yield ": connected\n\n"
    while True:
        try:
            event = await asyncio.wait_for(it.__anext__(), KEEPALIVE_S)
        except TimeoutError:
            yield ": keepalive\n\n"
            continue
        except StopAsyncIteration:
            yield "event: end\ndata: {}\n\n"
            return
        yield sse_event(event)


def events_route(engine: Any) -> Route:
    """GET /run/events?id=RUN: the SSE stream."""

    async def handler(request: Request) -> Response:
        run_id = request.query_params.get("id", "")
        after = _cursor(request)
        if after is None:
            return _plain("Last-Event-ID/after must be a cursor (0, 1, 2, ...)", 400)
        try:
            follow = engine.follow(run_id, after=after, poll_s=SSE_POLL_S)
        except RunNotFound:
            return _plain(f"no run {run_id!r}", 404)
        except DurablyError as exc:
            return _plain(str(exc), 400)
        return StreamingResponse(
            _stream(follow),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    return Route("/run/events", handler)


def fragment_route(engine: Any, r: Renderer) -> Route:
    """GET /run/live?id=RUN: the run page's changing part (header, approval, timeline)."""

    def handler(request: Request) -> Response:
        run_id = request.query_params.get("id", "")
        try:
            view = pages.run_view(engine, run_id)
        except RunNotFound:
            return _plain(f"no run {run_id!r}", 404)
        html = r.fragment("run_live.html", csrf=getattr(request.state, "csrf", ""), **view)
        return HTMLResponse(html, headers={"Cache-Control": "no-store"})

    return Route("/run/live", handler)


def routes(engine: Any, r: Renderer) -> list[Route]:
    """The live routes."""
    return [events_route(engine), fragment_route(engine, r)]
