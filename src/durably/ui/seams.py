"""The one place the dashboard reaches durably's read seams.

The pages call :func:`list_runs`, :func:`count_runs`, :func:`explain`, :func:`visible`
and :func:`invisible_chars` here and nothing else of the kind, so the app stays on
durably's public API (``engine.list_runs``, ``engine.count_runs``, ``durably.explain``,
``durably.visible``) and a change of those seams is a change of this file.
"""

from __future__ import annotations

import durably
from durably.visible import invisible_chars as _invisible_chars
from durably.visible import visible as _visible

KEEP = "\n"
"""Characters shown as they are: multi-line values keep their line breaks."""


def list_runs(
    engine: durably.Engine,
    *,
    status: str | None = None,
    workflow: str | None = None,
    version: str | None = None,
    queue: str | None = None,
    search: str | None = None,
    after: str | None = None,
    limit: int = 50,
) -> durably.RunPage:
    """A page of runs matching the filters, newest first, with its ``next`` cursor."""
    return engine.list_runs(
        status=status,
        workflow=workflow,
        version=version,
        queue=queue,
        search=search,
        after=after,
        limit=limit,
    )


def count_runs(
    engine: durably.Engine,
    *,
    workflow: str | None = None,
    version: str | None = None,
    queue: str | None = None,
    search: str | None = None,
) -> dict[str, int]:
    """Runs matching the filters, counted per status (every status a key)."""
    return engine.count_runs(workflow=workflow, version=version, queue=queue, search=search)


def explain(engine: durably.Engine, run_id: str) -> str:
    """The one sentence saying why the run is where it is and what to do."""
    return durably.explain(engine, run_id).sentence


def explanation(engine: durably.Engine, run_id: str) -> durably.Explanation:
    """The sentence and the facts it rests on (label, text)."""
    return durably.explain(engine, run_id)


def visible(text: str) -> str:
    """``text`` with its invisible characters shown (``<U+200B>``); line breaks kept."""
    return _visible(text, keep=KEEP)


def invisible_chars(text: str) -> list[str]:
    """The invisible code points in ``text`` (``"U+200B"``), each once."""
    return _invisible_chars(text, keep=KEEP)


__all__ = ["count_runs", "explain", "explanation", "invisible_chars", "list_runs", "visible"]
