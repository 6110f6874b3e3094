"""What every command shares: the ``--db`` option, opening an engine, and the JSON and
text forms of runs and steps."""

from __future__ import annotations

import datetime as dt
import json
import math
import re
import time
from collections.abc import Callable
from typing import Any

import click

from ..engine import DEFAULT_URL
from ..errors import DurablyError
from ..history import WAITING, RunRecord, StepRecord
from ..ownership import describe_owner, orphaned
from ..redact import redact
from ..visible import visible

UNREADABLE_CHARS_MAX = 2_000
"""How much of a stored value that does not parse ``--json`` shows."""


def db_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The ``--db URL`` option shared by every command."""
    return click.option(
        "--db",
        "db",
        envvar="DURABLY_URL",
        default=DEFAULT_URL,
        show_default=True,
        help="Journal database URL (sqlite:///path or postgresql://...); env DURABLY_URL.",
    )(fn)


class CommandError(click.ClickException):
    """A command's failure: a message on stderr, or with ``--json`` an ``{"error": ...}``
    object on stdout (so a script piping to ``jq`` gets JSON either way); exit status 1.

    The message is passed through :func:`durably.redact.redact` (errors may quote the
    database URL) and :func:`inert` (they may quote journal text).
    """

    def __init__(self, message: str, as_json: bool = False) -> None:
        super().__init__(inert(redact(message), keep="\n"))
        self.as_json = as_json

    def show(self, file: Any = None) -> None:
        """Print the error in the form the command's caller asked for."""
        if self.as_json:
            click.echo(json.dumps({"error": self.message}, sort_keys=True))
        else:
            super().show(file)


def open_engine(db: str, as_json: bool = False) -> Any:
    """An Engine on ``db`` for inspection, with errors turned into clean CLI messages."""
    from ..engine import Engine

    if db.startswith("sqlite:///") and db != "sqlite:///:memory:":
        from pathlib import Path

        path = Path(db[len("sqlite:///") :])
        if not path.exists():
            raise CommandError(_no_journal(path, db), as_json)
    try:
        return Engine(db)
    except DurablyError as exc:
        raise CommandError(str(exc), as_json) from exc


def _no_journal(path: Any, db: str) -> str:
    """Why ``--db`` names no journal, and what to pass: a first run with neither ``--db``
    nor ``DURABLY_URL`` looks for the default file in the current directory."""
    import os

    where = "" if path.is_absolute() else f" (relative to {os.getcwd()})"
    fix = (
        "pass --db with the URL your durably.Engine(...) opens (e.g. --db"
        " sqlite:///agent.db) or set DURABLY_URL"
    )
    if db == DEFAULT_URL and not os.environ.get("DURABLY_URL"):
        return (
            f"no journal at {path}{where}: neither --db nor DURABLY_URL was given, so the"
            f" default {DEFAULT_URL} was read; {fix}"
        )
    return f"no journal at {path}{where} (from --db {db}); check the path, or {fix}"


def module_db_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The ``--db URL`` option of commands that import ``MODULE:ENGINE`` (no default: the
    module's own ``Engine()`` decides, unless this is given)."""
    return click.option(
        "--db",
        "db",
        envvar="DURABLY_URL",
        default=None,
        help="Journal URL; set as DURABLY_URL before MODULE is imported, so an"
        " Engine() without a URL uses it. Env DURABLY_URL.",
    )(fn)


def load_engine(target: str, db: str | None, as_json: bool = False) -> Any:
    """The ``durably.Engine`` at ``module:attr`` or ``path/to/file.py:attr``, imported with
    ``DURABLY_URL`` set to ``db`` first (so an ``Engine()`` without a URL uses it); an
    engine bound to another URL than ``db`` is refused. Any failure is a
    :class:`CommandError` (a JSON object under ``--json``)."""
    import os

    from ..chaos.workflow_chaos import import_target
    from ..engine import Engine

    if db:
        os.environ["DURABLY_URL"] = db
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise click.BadParameter(
            "write MODULE:ENGINE, e.g. myapp.agents:engine or path/to/agents.py:engine",
            param_hint="MODULE:ENGINE",
        )
    try:
        engine = getattr(import_target(module_name), attr)
    except (ImportError, AttributeError, OSError, DurablyError) as exc:
        raise CommandError(
            f"cannot load {target}: {exc}{_load_advice(exc, module_name, attr)}", as_json
        ) from exc
    except Exception as exc:
        # The module's own code failed while it was imported: say so, not a traceback.
        raise CommandError(
            f"cannot load {target}: importing {module_name} raised {type(exc).__name__}:"
            f" {exc}; fix the module (importing it in Python shows the traceback)",
            as_json,
        ) from exc
    if not isinstance(engine, Engine):
        raise CommandError(f"{target} is a {type(engine).__name__}, not a durably.Engine", as_json)
    if db and engine.url != db:
        raise CommandError(
            f"{target} is bound to {engine.url} but --db/DURABLY_URL says {db}; build the"
            " engine with durably.Engine() (no URL) to take it from DURABLY_URL",
            as_json,
        )
    return engine


def _load_advice(exc: BaseException, module_name: str, attr: str) -> str:
    """What to do about a MODULE:ENGINE that did not load: the module not found (where
    it is looked for), or no such attribute on it (which name to give)."""
    if isinstance(exc, ModuleNotFoundError) and exc.name == module_name.split(".")[0]:
        return (
            "; run the command from the folder that holds the module (the current"
            " directory is searched), or name the file: path/to/agents.py:ENGINE"
        )
    if isinstance(exc, AttributeError):
        return f"; give the name the module binds its durably.Engine to, in place of {attr!r}"
    return ""


def run_json(run: RunRecord) -> dict[str, Any]:
    """A run as plain JSON data for ``--json``."""
    return {
        "run_id": run.run_id,
        "workflow": run.workflow,
        "version": run.version,
        "prompt_version": run.prompt_version,
        "queue": run.queue,
        "status": run.status,
        "generation": run.generation,
        "starts": run.starts,
        "fencing_token": run.fencing_token,
        "incarnation": run.incarnation,
        "owner": run.owner,
        "owner_host": describe_owner(run.owner)[0] or None,
        "owner_pid": describe_owner(run.owner)[1],
        "lease_expires_at": run.lease_expires_at,
        "orphaned": orphaned(run, time.time()),
        "input": stored_json(run.input),
        "outcome": stored_json(run.outcome),
        "error_type": run.error_type,
        "error_message": run.error_message,
        "reason": run.park_reason,
        "cancel_requested_at": run.cancel_requested_at,
        "cancel_reason": run.cancel_reason,
        "wake_at": run.wake_at,
        "created_at": run.created_at,
        "updated_at": run.updated_at,
        "finished_at": run.finished_at,
    }


def step_json(run: RunRecord, s: StepRecord) -> dict[str, Any]:
    """A history record as plain JSON data for ``--json``."""
    return {
        "seq": s.position,
        "kind": s.kind,
        "name": s.name,
        "status": s.status,
        "digest": s.digest,
        "key": run.key(s.position),
        "attempts": s.attempts,
        "duration_s": None if s.finished_at is None else round(s.finished_at - s.started_at, 6),
        "output": stored_json(s.output),
        "error_type": s.error_type,
        "error_message": s.error_message,
        "usage_tokens": s.usage_tokens,
        "usage_cost_usd": s.usage_cost_usd,
    }


def stored_json(text: str | None) -> Any:
    """A stored JSON column as data; a row that does not parse (hand-edited, too deep,
    an int past the digit limit) is shown as its text, so one bad row cannot break
    ``--json`` output for the rest."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return {"unreadable": text[:UNREADABLE_CHARS_MAX]}


def status_text(run: RunRecord) -> str:
    """The run's status for a table: the park reason of a parked run, and "orphaned"
    for a running run nobody drives (owner provably dead, lease expired, or no owner)."""
    # A run that continued as new says which generation it is in (g3): its keys do too.
    gen = "" if run.generation == 0 else f" g{run.generation}"
    if orphaned(run, time.time()):
        return f"{run.status} (orphaned){gen}"
    return (
        run.status
        if run.park_reason is None or run.status != "parked"
        else (f"parked({run.park_reason})")
    ) + gen


def owner_text(run: RunRecord) -> str:
    """``host:pid`` of the run's owner ("" without one; "?" for a string that is not an
    owner)."""
    host, pid = describe_owner(run.owner)
    return host if pid is None else f"{host}:{pid}"


def lease_text(run: RunRecord) -> str:
    """When the run's lease expires, or "expired"."""
    if run.lease_expires_at is None:
        return ""
    return "expired" if run.lease_expires_at <= time.time() else ts(run.lease_expires_at)


def ts(t: float | None) -> str:
    if t is None:
        return ""
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def duration(s: StepRecord) -> str:
    if s.status == WAITING:
        return "waiting"  # a timer not yet over: its output holds the wake time
    if s.finished_at is None:
        return "in flight"
    ms = (s.finished_at - s.started_at) * 1000
    return f"{ms:.1f} ms" if ms < 10_000 else f"{ms / 1000:.1f} s"


def inert(text: str, keep: str = "") -> str:
    """``text`` with control, format and invisible characters (but those in ``keep``)
    shown visibly: :func:`durably.visible.visible`, the one rule for journal text (C0/C1
    controls as ``\\xNN`` escapes, zero-width, bidi and tag characters as ``<U+200B>``),
    so text that came from a journal or an exception cannot drive the terminal or hide
    characters from the reader."""
    return visible(text, keep=keep)


def term(value: object) -> str:
    """``value`` as text safe to print through rich: markup escaped (a ``[/link]`` in a
    step's error is text, not a tag) and control characters shown as ``\\xNN`` escapes,
    so nothing from the journal (often model or tool output) can drive the terminal or
    hide characters (see :func:`inert`)."""
    from rich.markup import escape

    return escape(inert(str(value)))


def term_lines(value: str, indent: str = "  ") -> str:
    """``value`` as :func:`term` text that keeps its line breaks, each line after the
    first indented by ``indent``: a replay mismatch's reason is several sentences on
    lines of their own, unreadable as one line of ``\\n`` escapes."""
    return ("\n" + indent).join(term(line) for line in value.split("\n"))


def json_text(data: Any) -> str:
    """``data`` as strict JSON for ``--json``: a NaN or infinite float (a step's result, or
    a hand-edited time) is written as the string "NaN", "Infinity" or "-Infinity", since
    json.dumps would write bare NaN/Infinity, which jq and other parsers refuse."""
    return json.dumps(_finite(data), sort_keys=True, allow_nan=False)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


_AGO = re.compile(r"([0-9]+(?:\.[0-9]+)?)([smhd])")
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def since_arg(
    text: str | None, as_json: bool, option: str = "--since"
) -> tuple[float | None, bool]:
    """``--since`` (or the time ``option`` another command names) as (a Unix time,
    False) or (an age in seconds, True), from an ISO-8601 time (UTC unless it names an
    offset) or an age such as 90s, 15m, 12h, 30d. A caller makes an age absolute on the
    clock it means (the engine's, or the wall clock)."""
    if text is None:
        return None, False
    ago = _AGO.fullmatch(text.strip())
    if ago:
        return float(ago.group(1)) * _UNIT_S[ago.group(2)], True
    try:
        when = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise CommandError(
            f"{option} {text!r}: write an ISO time (2026-11-30T06:00) or an age (90m, 24h, 7d)",
            as_json,
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.timestamp(), False
