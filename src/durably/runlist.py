"""Listing runs a page at a time: ``engine.list_runs`` and ``engine.count_runs``.

Pages are keyset-paged on ``(created_at, run_id)`` (newest first, then run id), never on
an offset: a page's cursor names the last run it showed, and the next page starts after
that run in that order. A run created while someone reads pages takes its own place in
that order (normally before every cursor handed out), so it can never push a run onto a
second page or make one skip a page; every run that existed when the walk began is seen
exactly once (as long as it keeps matching the filters: a ``status`` filter follows the
status a run has when its page is read).

This module checks the arguments (every bad one raises ``ConfigError`` saying what to
pass) and encodes the cursor; the stores run the query (``Store.list_runs``).
"""

from __future__ import annotations

import binascii
import json
import math
from collections.abc import Iterable
from typing import Final

from ._record import Record, set_field
from .errors import ConfigError
from .history import (
    BLOCKED,
    CANCELLED,
    COMPLETED,
    CONTINUED,
    FAILED_RUN,
    IN_DOUBT,
    PARKED,
    QUARANTINED,
    QUEUED,
    RUN_STATUSES,
    RUNNING,
    RunRecord,
    unstorable,
)
from .limits import LIST_RUNS_LIMIT_MAX as LIST_RUNS_LIMIT_MAX
from .limits import LIST_RUNS_SEARCH_CHARS_MAX as LIST_RUNS_SEARCH_CHARS_MAX

__all__ = [
    "LIST_RUNS_LIMIT_DEFAULT",
    "LIST_RUNS_LIMIT_MAX",
    "LIST_RUNS_SEARCH_CHARS_MAX",
    "STATUS_ORDER",
    "LiveWorker",
    "RunPage",
]

LIST_RUNS_LIMIT_DEFAULT: Final = 50
"""Runs on one page of ``engine.list_runs`` unless ``limit`` says otherwise."""

STATUS_ORDER: Final = (
    QUEUED,
    RUNNING,
    PARKED,
    IN_DOUBT,
    BLOCKED,
    QUARANTINED,
    COMPLETED,
    FAILED_RUN,
    CANCELLED,
    CONTINUED,
)
"""Every run status, in the order of a run's life: the keys of ``engine.count_runs``."""
assert frozenset(STATUS_ORDER) == RUN_STATUSES

_CURSOR_PREFIX: Final = "r1."  # the cursor format's version: a later format can tell it apart


class LiveWorker(Record, frozen=True):
    """A worker the journal holds a live row for (``engine.live_workers``): its owner
    string, the host and pid it names (``"?"``/None when the string is not one durably
    wrote), and the queues it serves."""

    __slots__ = ("host", "owner", "pid", "queues")

    owner: str
    host: str
    pid: int | None
    queues: tuple[str, ...]

    def __init__(self, owner: str, host: str, pid: int | None, queues: tuple[str, ...]) -> None:
        set_field(self, "owner", owner)
        set_field(self, "host", host)
        set_field(self, "pid", pid)
        set_field(self, "queues", queues)


class RunPage(Record, frozen=True):
    """One page of ``engine.list_runs``: ``runs`` newest first, and ``next``, the opaque
    cursor to pass as ``after=`` for the page after this one (None on the last page)."""

    __slots__ = ("next", "runs")

    runs: list[RunRecord]
    next: str | None

    def __init__(self, runs: list[RunRecord], next: str | None) -> None:
        set_field(self, "runs", runs)
        set_field(self, "next", next)


def encode_cursor(run: RunRecord) -> str:
    """The cursor naming ``run``'s place in the order: the next page starts after it."""
    import base64  # here and below: cursors only, not a cost of every start

    raw = json.dumps([run.created_at, run.run_id], separators=(",", ":")).encode()
    return _CURSOR_PREFIX + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(after: object) -> tuple[float, str] | None:
    """``after`` (None or a cursor from ``RunPage.next``) as ``(created_at, run_id)``."""
    if after is None:
        return None
    if isinstance(after, str) and after.startswith(_CURSOR_PREFIX):
        import base64

        body = after[len(_CURSOR_PREFIX) :]
        try:
            value = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        except (ValueError, binascii.Error):
            value = None
        if (
            isinstance(value, list)
            and len(value) == 2
            and isinstance(value[0], (int, float))
            and not isinstance(value[0], bool)
            and math.isfinite(value[0])
            and isinstance(value[1], str)
            # A cursor is base64 of JSON anyone can write: a run id no journal holds
            # (a NUL, a lone surrogate) is no cursor list_runs returned.
            and unstorable(value[1]) is None
        ):
            return float(value[0]), value[1]
    raise ConfigError(
        f"after must be None (the first page) or the .next cursor of a page"
        f" engine.list_runs returned, got {_shown(after)}"
    )


def check_statuses(status: object) -> list[str] | None:
    """``status`` (None, one run status, or a sequence of them) as a list, or None."""
    if status is None:
        return None
    items: list[object]
    if isinstance(status, str):
        items = [status]
    elif isinstance(status, (list, tuple, set, frozenset)):
        items = list(status)
    else:
        items = [status]
    bad = [s for s in items if not isinstance(s, str) or s not in RUN_STATUSES]
    if bad or not items:
        raise ConfigError(
            f"status must be None (any status), a run status or a non-empty list of them"
            f" ({', '.join(STATUS_ORDER)}), got {_shown(status)}"
        )
    return sorted({str(s) for s in items})


def check_text(value: object, what: str) -> str | None:
    """A text filter (workflow, version, queue, search): None or a str a journal can hold
    (no NUL, no lone surrogate: PostgreSQL refuses the one, neither database takes the
    other, and no stored name holds either)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ConfigError(f"{what} must be None (no filter) or a str, got {_shown(value)}")
    bad = unstorable(value)
    if bad is not None:
        raise ConfigError(
            f"{what} {value[:40]!a} holds {bad}, which no journal text holds; pass printable"
            " text (or None for no filter)"
        )
    return value


def check_search(search: object) -> str | None:
    """``search``: None or a str of at most ``LIST_RUNS_SEARCH_CHARS_MAX`` characters
    (an empty one filters nothing out: every run id contains it)."""
    text = check_text(search, "search")
    if text is not None and len(text) > LIST_RUNS_SEARCH_CHARS_MAX:
        raise ConfigError(
            f"search must be at most {LIST_RUNS_SEARCH_CHARS_MAX} characters (the longest"
            f" run id), got {len(text)}"
        )
    return text or None


def check_limit(limit: object) -> int:
    """``limit``: an int from 1 to ``LIST_RUNS_LIMIT_MAX``."""
    if isinstance(limit, int) and not isinstance(limit, bool) and 1 <= limit <= LIST_RUNS_LIMIT_MAX:
        return limit
    raise ConfigError(
        f"limit must be an int from 1 to {LIST_RUNS_LIMIT_MAX} (walk the pages with"
        f" after=page.next for more), got {_shown(limit)}"
    )


def check_since(since: object) -> float | None:
    """``since``: None or a finite epoch time in seconds."""
    if since is None:
        return None
    if isinstance(since, (int, float)) and not isinstance(since, bool) and math.isfinite(since):
        return float(since)
    raise ConfigError(
        f"since must be None or a time in epoch seconds (created at or after it), got"
        f" {_shown(since)}"
    )


def page_of(rows: list[RunRecord], limit: int) -> RunPage:
    """The page for ``rows`` as read with ``limit + 1``: the extra row only tells that
    another page follows."""
    runs = rows[:limit]
    more = len(rows) > limit
    return RunPage(runs, encode_cursor(runs[-1]) if more and runs else None)


def all_statuses(counts: dict[str, int]) -> dict[str, int]:
    """``counts`` with every run status present (zeros included), in ``STATUS_ORDER``;
    a status the journal holds that this version does not know is kept after them."""
    out = {s: int(counts.get(s, 0)) for s in STATUS_ORDER}
    extra: Iterable[tuple[str, int]] = sorted((s, n) for s, n in counts.items() if s not in out)
    out.update(extra)
    return out


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
