"""The one place the dashboard reaches durably's read seams.

The pages call :func:`list_runs`, :func:`count_runs`, :func:`explain` and :func:`visible`
here and nothing else of the kind, so the app stays on durably's public API: when a seam
exists (``engine.list_runs``, ``engine.count_runs``, ``durably.explain``,
``durably.visible``) it is used as it is. The ``_fallback_*`` helpers stand in only
until those seams land on main, and go then.
"""

from __future__ import annotations

import importlib
import unicodedata
from dataclasses import dataclass
from typing import Any

PAGE_SIZE_MAX = 200
"""Most runs one page of the runs list shows."""


@dataclass(frozen=True, slots=True)
class Page:
    """One page of runs, newest first, and the cursor of the next page (None: last)."""

    runs: list[Any]
    next: str | None


def list_runs(
    engine: Any,
    *,
    status: str | None = None,
    workflow: str | None = None,
    version: str | None = None,
    queue: str | None = None,
    search: str | None = None,
    after: str | None = None,
    limit: int = 50,
) -> Page:
    """A page of runs matching the filters (``engine.list_runs``)."""
    if not hasattr(engine, "list_runs"):
        return _fallback_list(engine, status, workflow, version, queue, search, after, limit)
    page = engine.list_runs(
        status=status,
        workflow=workflow,
        version=version,
        queue=queue,
        search=search,
        after=after,
        limit=limit,
    )
    return Page(list(page.runs), page.next)


def count_runs(
    engine: Any,
    *,
    workflow: str | None = None,
    version: str | None = None,
    queue: str | None = None,
    search: str | None = None,
) -> dict[str, int]:
    """Runs matching the filters, counted per status (``engine.count_runs``)."""
    if not hasattr(engine, "count_runs"):
        return _fallback_count(engine, workflow, version, queue, search)
    counts: dict[str, int] = engine.count_runs(
        workflow=workflow, version=version, queue=queue, search=search
    )
    return counts


def explain(engine: Any, run_id: str) -> str:
    """The one sentence saying why the run is where it is (``durably.explain``)."""
    import durably

    if not hasattr(durably, "explain"):
        import time

        from .. import why

        return why.explain(why.gather(engine, run_id, time.time())).sentence
    return str(durably.explain(engine, run_id).sentence)


def visible(text: str) -> str:
    """``text`` with its invisible characters shown as ``<U+200B>`` (``durably.visible``)."""
    try:
        mod = importlib.import_module("durably.visible")
    except ImportError:
        return "".join(f"<U+{ord(c):04X}>" if _invisible(c) else c for c in text)
    return str(mod.visible(text))


def invisible_chars(text: str) -> list[str]:
    """The invisible code points in ``text`` (``durably.visible.invisible_chars``)."""
    try:
        mod = importlib.import_module("durably.visible")
    except ImportError:
        return sorted({f"U+{ord(c):04X}" for c in text if _invisible(c)})
    return [str(c) for c in mod.invisible_chars(text)]


# -- stand-ins until the seams land -------------------------------------------------------


def _invisible(c: str) -> bool:
    if c in "\n\t":
        return False
    return unicodedata.category(c) in ("Cf", "Cc", "Zl", "Zp") or c == "\u00ad"


def _fallback_rows(
    engine: Any,
    status: str | None,
    workflow: str | None,
    version: str | None,
    queue: str | None,
    search: str | None,
) -> list[Any]:
    rows = engine.store.list_runs(status=status, workflow=workflow, version=version, limit=10**7)
    return [
        r
        for r in rows
        if (queue is None or r.queue == queue) and (search is None or search in r.run_id)
    ]


def _fallback_list(
    engine: Any,
    status: str | None,
    workflow: str | None,
    version: str | None,
    queue: str | None,
    search: str | None,
    after: str | None,
    limit: int,
) -> Page:
    rows = _fallback_rows(engine, status, workflow, version, queue, search)
    start = int(after or 0)
    end = start + limit
    return Page(rows[start:end], str(end) if end < len(rows) else None)


def _fallback_count(
    engine: Any, workflow: str | None, version: str | None, queue: str | None, search: str | None
) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in _fallback_rows(engine, None, workflow, version, queue, search):
        counts[r.status] = counts.get(r.status, 0) + 1
    return counts
