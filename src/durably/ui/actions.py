"""The buttons: approve, reject, signal, cancel, retry, fork. Each is a POST that checks
its CSRF field, calls one public engine method, and answers with a page that says what
happened and links back; bad input (bad JSON, an unknown run, a decided request) gets a
clear message and changes nothing."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl, quote

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from durably import (
    ApprovalAlreadyDecided,
    ApprovalMismatch,
    ApprovalNotFound,
    DurablyError,
    RunConflict,
    RunFinished,
    RunNotFound,
)

from .auth import CSRF_FIELD, csrf_ok, same_origin
from .render import Renderer

FORM_BYTES_MAX = 256 * 1024
"""Largest form body accepted (a signal's data is at most 64 KiB of JSON)."""


class BadInput(Exception):
    """A form field is missing or malformed; the message says which and how to fix it."""


async def read_form(request: Request) -> dict[str, str] | Response:
    """The POST's fields, or a 403/413/400 response when its CSRF field does not match
    its cookie, it is too large, or it is not a form."""
    body = await request.body()
    if len(body) > FORM_BYTES_MAX:
        return Response("form too large", status_code=413, media_type="text/plain")
    try:
        fields = dict(parse_qsl(body.decode("utf-8"), keep_blank_values=True))
    except UnicodeDecodeError:
        return Response("the form is not UTF-8", status_code=400, media_type="text/plain")
    h = request.headers
    if not request.state.bearer and not same_origin(
        h.get("host"), h.get("origin"), h.get("sec-fetch-site")
    ):
        return Response(
            "refused: this POST was sent by a page of another site or origin (its Origin or"
            " Sec-Fetch-Site header says so); decide from the dashboard's own pages",
            status_code=403,
            media_type="text/plain",
        )
    if not request.state.bearer and not csrf_ok(request.state.csrf_cookie, fields.get(CSRF_FIELD)):
        return Response(
            "refused: this POST's CSRF field does not match its cookie (reload the page and"
            " try again; a form from another site cannot decide here)",
            status_code=403,
            media_type="text/plain",
        )
    return fields


def _need(fields: dict[str, str], name: str, what: str) -> str:
    value = fields.get(name, "").strip()
    if not value:
        raise BadInput(f"{what} is missing: fill in the {name!r} field")
    return value


def _run_link(run_id: str) -> str:
    return f"/run?id={quote(run_id, safe='')}"


# Each action: (fields) -> (what happened, the page to go back to).
Action = Callable[[Any, dict[str, str], str | None], tuple[str, str]]


def _approve(engine: Any, f: dict[str, str], by: str | None) -> tuple[str, str]:
    run_id = _need(f, "run_id", "the run id")
    request_id = _need(f, "request_id", "the request id")
    digest = _need(f, "digest", "the request's digest")
    note = f.get("note") or None
    d = engine.approve(run_id, request_id, digest=digest, by=by, note=note)
    return (
        f"Approved request {request_id} of run {run_id} (digest {digest[:12]}...) as"
        f" {d.by or 'nobody named'}; the run wakes to continue.",
        _run_link(run_id),
    )


def _reject(engine: Any, f: dict[str, str], by: str | None) -> tuple[str, str]:
    run_id = _need(f, "run_id", "the run id")
    request_id = _need(f, "request_id", "the request id")
    digest = _need(f, "digest", "the request's digest")
    reason = f.get("reason") or None
    d = engine.reject(run_id, request_id, digest=digest, by=by, reason=reason)
    return (
        f"Rejected request {request_id} of run {run_id} as {d.by or 'nobody named'}; the"
        " workflow gets the rejection and goes on.",
        _run_link(run_id),
    )


def _signal(engine: Any, f: dict[str, str], by: str | None) -> tuple[str, str]:
    run_id = _need(f, "run_id", "the run id")
    name = _need(f, "name", "the signal's name")
    raw = f.get("data", "").strip()
    try:
        data = json.loads(raw) if raw else None
    except ValueError as exc:
        raise BadInput(
            f'the signal\'s data is not JSON ({exc}); write e.g. {{"ok": true}}, "text" in'
            " quotes, or leave it empty for null. Nothing was sent."
        ) from None
    seq = engine.signal(run_id, name, data)
    return f"Sent signal {name!r} to run {run_id} (its signal #{seq}).", _run_link(run_id)


def _cancel(engine: Any, f: dict[str, str], by: str | None) -> tuple[str, str]:
    run_id = _need(f, "run_id", "the run id")
    reason = f.get("reason", "").strip() or None
    if by and reason:
        reason = f"{reason} (by {by})"
    run = engine.cancel(run_id, reason=reason)
    if run.status == "cancelled":
        return f"Run {run_id} is cancelled.", _run_link(run_id)
    return (
        f"Asked run {run_id} to cancel: it unwinds at its next step and then ends cancelled.",
        _run_link(run_id),
    )


def _retry(engine: Any, f: dict[str, str], by: str | None) -> tuple[str, str]:
    run_id = _need(f, "run_id", "the run id")
    run = engine.retry(run_id)
    return (
        f"Run {run_id} is {run.status} again: a worker (or engine.resume) continues it;"
        " recorded steps replay, nothing done is redone.",
        _run_link(run_id),
    )


def _fork(engine: Any, f: dict[str, str], by: str | None) -> tuple[str, str]:
    run_id = _need(f, "run_id", "the run id")
    at_text = _need(f, "at", "the position to fork at")
    try:
        at = int(at_text)
    except ValueError:
        raise BadInput(f"the position to fork at must be a whole number, got {at_text!r}") from None
    new_id = f.get("new_run_id", "").strip() or None
    handle = engine.fork(run_id, at=at, new_run_id=new_id)
    return (
        f"Forked run {run_id} at position {at} as the new run {handle.run_id} (queued):"
        f" its recorded results below {at} replay (a decided approval is asked again),"
        " and every effect from there on happens again, under new keys.",
        _run_link(handle.run_id),
    )


ACTIONS: dict[str, Action] = {
    "approve": _approve,
    "reject": _reject,
    "signal": _signal,
    "cancel": _cancel,
    "retry": _retry,
    "fork": _fork,
}


def _status_of(exc: DurablyError) -> int:
    if isinstance(exc, (RunNotFound, ApprovalNotFound)):
        return 404
    if isinstance(exc, (RunFinished, ApprovalAlreadyDecided, RunConflict)):
        return 409
    if isinstance(exc, ApprovalMismatch):
        return 409
    return 400


def action_route(engine: Any, r: Renderer, name: str, act: Action) -> Route:
    """The POST /actions/NAME route of one button."""

    async def handler(request: Request) -> Response:
        form = await read_form(request)
        if isinstance(form, Response):
            return form
        back = _run_link(form["run_id"]) if form.get("run_id") else "/runs"
        from starlette.concurrency import run_in_threadpool

        try:
            said, back = await run_in_threadpool(act, engine, form, request.state.user)
        except BadInput as exc:
            return r.page(
                request,
                "result.html",
                400,
                ok=False,
                title=f"{name}: not done",
                message=str(exc),
                back=back,
            )
        except DurablyError as exc:
            return r.page(
                request,
                "result.html",
                _status_of(exc),
                ok=False,
                title=f"{name}: not done",
                message=f"{type(exc).__name__}: {exc}",
                back=back,
            )
        return r.page(
            request, "result.html", ok=True, title=f"{name}: done", message=said, back=back
        )

    return Route(f"/actions/{name}", handler, methods=["POST"])


def routes(engine: Any, r: Renderer) -> list[Route]:
    """The POST routes of the buttons."""
    return [action_route(engine, r, name, act) for name, act in ACTIONS.items()]
