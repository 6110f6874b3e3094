"""Templates and the pure helpers they use: times, JSON shown readably, invisible
characters made visible, and model calls read as a conversation.

Autoescape is on for every template and no template marks journal data ``|safe``: run
ids, names, outputs and error messages are model or tool text and are always escaped.
"""

from __future__ import annotations

import datetime as dt
import json
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse

from . import seams

TEMPLATES = Path(__file__).parent / "templates"
FOLD_CHARS = 240
"""A value longer than this (as shown) is folded under a <details>."""
SHOWN_CHARS_MAX = 200_000
"""Most characters of one value a page shows (the rest is cut, saying so)."""
MODEL_PREFIXES = ("openai.", "anthropic.")
"""Step names of recorded model calls (the model-client integrations name them so)."""


def new_csrf() -> str:
    """A fresh CSRF token for a browser's cookie."""
    return secrets.token_urlsafe(24)


def when(t: float | None) -> str:
    """A journal time (seconds since the epoch) as UTC, to the second."""
    if t is None:
        return ""
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def duration(seconds: float | None) -> str:
    """``850 ms``, ``12.3 s``, ``4 min 5 s``: a step's duration."""
    if seconds is None:
        return ""
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    return f"{int(seconds // 60)} min {int(seconds % 60)} s"


def pretty(value: Any) -> str:
    """A JSON value indented, invisible characters shown, cut at SHOWN_CHARS_MAX."""
    text = value if isinstance(value, str) else json.dumps(value, indent=2, ensure_ascii=False)
    return cut(seams.visible(text))


def pretty_json_text(text: str | None) -> str:
    """A recorded JSON text shown readably (as it is when it does not parse)."""
    if text is None:
        return ""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return cut(seams.visible(text))
    if isinstance(value, str):
        return cut(seams.visible(value))
    return pretty(value)


def cut(text: str) -> str:
    """``text`` cut at SHOWN_CHARS_MAX characters, saying how much was left out."""
    if len(text) <= SHOWN_CHARS_MAX:
        return text
    return f"{text[:SHOWN_CHARS_MAX]}\n... ({len(text) - SHOWN_CHARS_MAX:,} more characters)"


@dataclass(frozen=True, slots=True)
class Turn:
    """One entry of a conversation: who (assistant, tool call, tool result), a title
    (the tool's name), and its text."""

    role: str
    title: str
    text: str
    position: str = ""


@dataclass(frozen=True, slots=True)
class ModelCall:
    """A recorded model call read back: its step position and name, the model, and the
    turns its response holds (text and tool calls)."""

    position: str
    name: str
    model: str
    turns: list[Turn] = field(default_factory=list)


def model_call(position: str, name: str, output: str | None) -> ModelCall | None:
    """The conversation in a recorded model call's output (an OpenAI ChatCompletion or
    Response, an Anthropic Message, as JSON), or None when it is none of them.

    A step named ``openai.*``/``anthropic.*`` (the integrations' names) is read as one;
    a step renamed with ``durably.step_name`` is recognised by its output's own
    markers (``"object": "chat.completion"`` or ``"response"``, or an assistant
    ``"type": "message"``), so a tool's ordinary dict is never mistaken for one.
    """
    if output is None or not output.startswith("{"):
        return None
    try:
        value = json.loads(output)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict):
        return None
    if not name.startswith(MODEL_PREFIXES) and not _marked(value):
        return None
    model = str(value.get("model", ""))
    try:
        turns = _chat_completion(value) or _response(value) or _message(value)
    except (TypeError, AttributeError, ValueError, RecursionError):
        # Not the provider's shape after all (a gateway's own answer): the timeline
        # shows the step's output as a value; the page never fails on it.
        return None
    if turns is None:
        return None
    return ModelCall(position, name, model, turns)


def _marked(v: dict[str, Any]) -> bool:
    if v.get("object") in ("chat.completion", "response"):
        return True
    return v.get("type") == "message" and v.get("role") == "assistant" and "model" in v


def _args_text(arguments: Any) -> str:
    if isinstance(arguments, str):
        try:
            return pretty(json.loads(arguments))
        except (ValueError, RecursionError):
            return pretty(arguments)
    return pretty(arguments)


def _chat_completion(v: dict[str, Any]) -> list[Turn] | None:
    choices = v.get("choices")
    if not isinstance(choices, list) or not choices:
        return None
    turns: list[Turn] = []
    for choice in choices:
        msg = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(msg, dict):
            continue
        if msg.get("content"):
            turns.append(Turn(str(msg.get("role", "assistant")), "", pretty(msg["content"])))
        for call in msg.get("tool_calls") or []:
            fn = call.get("function", {}) if isinstance(call, dict) else {}
            turns.append(
                Turn("tool call", str(fn.get("name", "")), _args_text(fn.get("arguments")))
            )
    return turns


def _response(v: dict[str, Any]) -> list[Turn] | None:
    output = v.get("output")
    if v.get("object") != "response" or not isinstance(output, list):
        return None
    turns: list[Turn] = []
    for item in output:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "message":
            for part in item.get("content") or []:
                if isinstance(part, dict) and "text" in part:
                    turns.append(Turn(str(item.get("role", "assistant")), "", pretty(part["text"])))
        elif item.get("type") == "function_call":
            turns.append(
                Turn("tool call", str(item.get("name", "")), _args_text(item.get("arguments")))
            )
    return turns


def _message(v: dict[str, Any]) -> list[Turn] | None:
    content = v.get("content")
    if v.get("type") != "message" or not isinstance(content, list):
        return None
    turns: list[Turn] = []
    for block in content:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text":
            turns.append(Turn(str(v.get("role", "assistant")), "", pretty(block.get("text", ""))))
        elif block.get("type") == "tool_use":
            turns.append(Turn("tool call", str(block.get("name", "")), pretty(block.get("input"))))
    return turns


def conversation(history: list[Any]) -> list[Turn]:
    """The run read as a conversation: each model call's turns, then the steps after it
    (the tools it called) as tool results, until the next model call. Empty when the run
    made no recognisable model call."""
    out: list[Turn] = []
    seen_model = False
    for rec in history:
        call = model_call(rec.position, rec.name, rec.output) if rec.kind == "step" else None
        if call is not None:
            seen_model = True
            out.append(Turn("model", call.model or call.name, "", rec.position))
            out.extend(Turn(t.role, t.title, t.text, rec.position) for t in call.turns)
        elif seen_model and rec.kind == "step":
            if rec.status == "failed":
                text = f"{rec.error_type}: {rec.error_message or ''}"
            else:
                text = pretty_json_text(rec.output)
            out.append(Turn("tool result", rec.name, text, rec.position))
    return out if seen_model else []


class Renderer:
    """The Jinja2 environment (autoescape on) and the page frame."""

    def __init__(self, db_label: str) -> None:
        self.env = Environment(
            loader=FileSystemLoader(TEMPLATES),
            autoescape=select_autoescape(default=True, default_for_string=True),
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.filters.update(
            when=when,
            duration=duration,
            pretty=pretty,
            pretty_json=pretty_json_text,
            visible=seams.visible,
        )
        self.env.globals.update(fold_chars=FOLD_CHARS, db_label=db_label)

    def page(
        self, request: Request, template: str, status_code: int = 200, **ctx: Any
    ) -> HTMLResponse:
        """Render ``template`` with the request's CSRF token and approver name."""
        html = self.env.get_template(template).render(
            request=request,
            csrf=getattr(request.state, "csrf", ""),
            user=getattr(request.state, "user", None),
            **ctx,
        )
        return HTMLResponse(html, status_code=status_code, headers=_HEADERS)

    def fragment(self, template: str, **ctx: Any) -> str:
        """Render a piece of a page (for the live updates)."""
        return self.env.get_template(template).render(**ctx)


# Nothing is loaded from elsewhere; the page may not be framed or sniffed.
_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'; base-uri 'none';"
    " form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    # same-origin, not no-referrer: under no-referrer a browser sends "Origin: null" with
    # the page's own form posts, and the Origin check needs the real one.
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
