"""The pages: runs (filters, counts, paging), one run (header, timeline, conversation,
pending approval), the inbox of runs waiting for a person, and the approvals."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

import durably
from durably import DurablyError, RunNotFound

from . import render, seams
from .render import Renderer

STATUSES = (
    "queued",
    "running",
    "parked",
    "in_doubt",
    "blocked",
    "quarantined",
    "completed",
    "failed",
    "cancelled",
)
"""Run statuses by their durably names, in a run's order of life (as ``count_runs``);
``continued`` is a generation's status, never a run row's, so it is not listed."""
INBOX_STATUSES = ("parked", "blocked", "in_doubt", "quarantined")
INBOX_PER_STATUS_MAX = 25
"""Runs of each status the inbox shows (with a link to the full list past it)."""
PAGE_SIZE = 50
SEARCH_CHARS_MAX = 200


def _filters(request: Request) -> dict[str, str | None]:
    q = request.query_params
    out: dict[str, str | None] = {}
    for name in ("status", "workflow", "version", "queue", "q"):
        value = (q.get(name) or "").strip()
        out[name] = value[:SEARCH_CHARS_MAX] or None
    return out


def runs_page(engine: Any, r: Renderer) -> Callable[[Request], Response]:
    """GET /runs: runs newest first, filtered, with counts per status and a next page."""

    def handler(request: Request) -> Response:
        f = _filters(request)
        if f["status"] is not None and f["status"] not in STATUSES:
            return r.page(
                request,
                "error.html",
                400,
                title="Unknown status",
                message=f"there is no run status {f['status']!r}; the statuses are "
                + ", ".join(STATUSES),
                back="/runs",
            )
        after = request.query_params.get("after") or None
        try:
            page = seams.list_runs(
                engine,
                status=f["status"],
                workflow=f["workflow"],
                version=f["version"],
                queue=f["queue"],
                search=f["q"],
                after=after,
                limit=PAGE_SIZE,
            )
            counts = seams.count_runs(
                engine,
                workflow=f["workflow"],
                version=f["version"],
                queue=f["queue"],
                search=f["q"],
            )
        except DurablyError as exc:
            return r.page(
                request, "error.html", 400, title="Cannot list runs", message=str(exc), back="/runs"
            )
        keep = {k: v for k, v in f.items() if v is not None}
        next_url = f"/runs?{urlencode({**keep, 'after': page.next})}" if page.next else None
        status_links = [
            (s, counts.get(s, 0), "/runs?" + urlencode({**keep, "status": s})) for s in STATUSES
        ]
        all_link = "/runs?" + urlencode({k: v for k, v in keep.items() if k != "status"})
        return r.page(
            request,
            "runs.html",
            runs=page.runs,
            f=f,
            total=sum(counts.values()),
            status_links=status_links,
            all_link=all_link,
            next_url=next_url,
            first_url="/runs?" + urlencode(keep) if after else None,
            statuses=STATUSES,
        )

    return handler


@dataclass(frozen=True, slots=True)
class Row:
    """One position of the timeline as the run page shows it."""

    position: str
    depth: int
    kind: str
    name: str
    status: str
    attempts: int
    duration: str
    tokens: int | None
    cost_usd: float | None
    key: str
    error: str
    output: str


def timeline(run: Any, history: list[Any]) -> list[Row]:
    """The run's positions in program order, ready to show."""
    rows = []
    for rec in history:
        took = None if rec.finished_at is None else max(0.0, rec.finished_at - rec.started_at)
        error = f"{rec.error_type}: {rec.error_message or ''}" if rec.error_type else ""
        output = rec.output or ""
        if output.startswith('{"$blob"'):
            shown = "(kept in the journal's blob table: large)"
        else:
            shown = render.pretty_json_text(rec.output) if rec.output is not None else ""
        rows.append(
            Row(
                position=rec.position,
                depth=rec.position.count(".") // 2,
                kind=rec.kind,
                name=rec.name,
                status=rec.status,
                attempts=rec.attempts,
                duration=render.duration(took),
                tokens=rec.usage_tokens,
                cost_usd=rec.usage_cost_usd,
                key=run.key(rec.position),
                error=seams.visible(error),
                output=shown,
            )
        )
    return rows


def run_view(engine: Any, run_id: str) -> dict[str, Any]:
    """Everything the run page and its live fragment show (raises ``RunNotFound``)."""
    run = engine.get_run(run_id)
    history = engine.history(run_id)
    spend = engine.spend(run_id)
    facts: list[durably.Fact] = []
    try:
        why = seams.explanation(engine, run_id)
        sentence, facts = why.sentence, why.facts
    except DurablyError as exc:
        sentence = f"(cannot explain this run: {exc})"
    pending = engine.pending_approvals(run_id) if run.status == "parked" else []
    positions = [r.position for r in history if "." not in r.position]
    return {
        "run": run,
        "sentence": sentence,
        "facts": facts,
        "spend": spend,
        "budget": spend.budget,
        "rows": timeline(run, history),
        "conversation": render.conversation(history),
        "pending": [approval_view(p) for p in pending],
        "positions": positions,
        # A run that continued as new: its finished generations (the timeline is the
        # current one's; `durably runs show RUN --generation N` prints an earlier one).
        "generations": engine.generations(run_id)[-5:] if run.generation else [],
        "terminal": run.status in ("completed", "failed", "cancelled", "continued"),
        "result": render.pretty_json_text(run.outcome) if run.outcome else "",
    }


def approval_view(p: Any) -> dict[str, Any]:
    """A pending approval as shown: exact action and arguments, invisible characters
    flagged, the digest the decision will post."""
    import json

    args_text = json.dumps(p.args, indent=2, ensure_ascii=False, sort_keys=True)
    flagged = seams.invisible_chars(p.action + args_text)
    return {
        "run_id": p.run_id,
        "request_id": p.request_id,
        "action": seams.visible(p.action),
        "args": render.cut(seams.visible(args_text)),
        "digest": p.digest,
        "requested_at": p.requested_at,
        "expires_at": p.expires_at,
        "expired": p.expires_at is not None and p.expires_at <= dt.datetime.now(dt.UTC),
        "invisible": flagged,
    }


def run_page(engine: Any, r: Renderer) -> Callable[[Request], Response]:
    """GET /run?id=RUN: one run."""

    def handler(request: Request) -> Response:
        run_id = request.query_params.get("id", "")
        if not run_id:
            return r.page(
                request,
                "error.html",
                400,
                title="No run named",
                message="open a run from the runs list (/run?id=RUN)",
                back="/runs",
            )
        try:
            view = run_view(engine, run_id)
        except RunNotFound:
            return not_found(request, r, run_id)
        except DurablyError as exc:
            return r.page(
                request, "error.html", 400, title="Cannot show run", message=str(exc), back="/runs"
            )
        return r.page(request, "run.html", **view)

    return handler


def not_found(request: Request, r: Renderer, run_id: str) -> HTMLResponse:
    """The 404 page for an unknown run id."""
    return r.page(
        request,
        "error.html",
        404,
        title="No such run",
        message=f"there is no run {seams.visible(run_id)!r} in this journal",
        back="/runs",
    )


def inbox_page(engine: Any, r: Renderer) -> Callable[[Request], Response]:
    """GET /inbox: runs waiting for a person, each with its why sentence and action."""

    def handler(request: Request) -> Response:
        groups = []
        for status in INBOX_STATUSES:
            page = seams.list_runs(engine, status=status, limit=INBOX_PER_STATUS_MAX)
            items = []
            for run in page.runs:
                try:
                    sentence = seams.explain(engine, run.run_id)
                except DurablyError as exc:
                    sentence = f"(cannot explain this run: {exc})"
                pending = engine.pending_approvals(run.run_id) if status == "parked" else []
                items.append({"run": run, "sentence": sentence, "pending": bool(pending)})
            more = f"/runs?status={status}" if page.next else None
            groups.append({"status": status, "entries": items, "more": more})
        return r.page(request, "inbox.html", groups=groups)

    return handler


def approvals_page(engine: Any, r: Renderer) -> Callable[[Request], Response]:
    """GET /approvals: every pending request with its exact action, arguments and digest."""

    def handler(request: Request) -> Response:
        pending = [approval_view(p) for p in engine.pending_approvals()]
        return r.page(request, "approvals.html", pending=pending)

    return handler


def routes(engine: Any, r: Renderer) -> list[Route]:
    """The GET routes of the pages."""
    return [
        Route("/runs", runs_page(engine, r)),
        Route("/run", run_page(engine, r)),
        Route("/inbox", inbox_page(engine, r)),
        Route("/approvals", approvals_page(engine, r)),
    ]
