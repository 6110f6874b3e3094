"""Reads for people and tools: runs listed and counted, spend, blobs, live workers, and
the run's event stream (a page, or followed live)."""

from __future__ import annotations

from collections.abc import Sequence

from .. import runlist
from ..budget import Spend
from ..errors import ConfigError
from ..events import EventPage, Follow
from ..limits import EVENTS_PAGE_MAX
from ..ownership import describe_owner, owner_dead
from ..runlist import LiveWorker, RunPage
from .base import Base

_CURSOR_MAX = 2**63 - 1
"""Largest event cursor: the journals keep cursors as 64-bit integers (BIGINT)."""


class Reads:
    """The engine's read methods (see the facade's docstrings)."""

    def __init__(self, base: Base) -> None:
        self._base = base

    def spend(self, run_id: str) -> Spend:
        """The run's spend and stored budget; raises ``RunNotFound``."""
        self._base.get_run(run_id)
        return self._base.call(lambda: self._base.store.get_spend(run_id))

    def list_runs(
        self,
        *,
        status: str | Sequence[str] | None,
        workflow: str | None,
        version: str | None,
        queue: str | None,
        search: str | None,
        after: str | None,
        limit: int,
        since: float | None,
    ) -> RunPage:
        """One page of runs, newest first (arguments checked)."""
        statuses = runlist.check_statuses(status)
        where = {
            "workflow": runlist.check_text(workflow, "workflow"),
            "version": runlist.check_text(version, "version"),
            "queue": runlist.check_text(queue, "queue"),
            "search": runlist.check_search(search),
        }
        cursor = runlist.decode_cursor(after)
        n = runlist.check_limit(limit)
        start = runlist.check_since(since)
        store = self._base.store
        rows = self._base.call(
            lambda: store.list_runs(statuses, limit=n + 1, since=start, after=cursor, **where)
        )
        return runlist.page_of(rows, n)

    def count_runs(
        self,
        *,
        workflow: str | None,
        version: str | None,
        queue: str | None,
        search: str | None,
        since: float | None,
    ) -> dict[str, int]:
        """Runs per status (every status a key), with ``list_runs``'s filters."""
        where = {
            "workflow": runlist.check_text(workflow, "workflow"),
            "version": runlist.check_text(version, "version"),
            "queue": runlist.check_text(queue, "queue"),
            "search": runlist.check_search(search),
        }
        start = runlist.check_since(since)
        counts = self._base.call(lambda: self._base.store.count_runs(since=start, **where))
        return runlist.all_statuses(counts)

    def runs_by_version(self) -> list[tuple[str, str | None, str, int]]:
        """Unfinished runs per ``(workflow, version, status, count)``."""
        return self._base.call(self._base.store.runs_by_version)

    def blobs(self, digests: Sequence[str]) -> dict[str, str]:
        """The stored blobs among ``digests``, as their JSON text by digest."""
        if isinstance(digests, str) or not all(isinstance(d, str) for d in digests):
            raise ConfigError(
                f"digests must be a list of content hashes (str), got {digests!r:.80}"
            )
        wanted = list(digests)
        return self._base.call(lambda: self._base.store.get_blobs(wanted))

    def live_workers(self, queue: str | None) -> list[LiveWorker]:
        """The workers whose heartbeat row has not expired, less this host's dead ones."""
        name = runlist.check_text(queue, "queue")
        rows = self._base.call(self._base.store.live_workers)
        out: list[LiveWorker] = []
        for owner, queues in rows:
            if (name is None or name in queues) and not owner_dead(owner):
                host, pid = describe_owner(owner)
                out.append(LiveWorker(owner, host, pid, tuple(queues)))
        return out

    def events(self, run_id: str, after: int, limit: int) -> EventPage:
        """One page of the run's event stream; raises ``RunNotFound``."""
        self._base.known_run_id(run_id)
        _check_cursor(after, limit)
        page = self._base.call(lambda: self._base.store.read_events(run_id, after, limit))
        if page is None:
            self._base.raise_if_pruned(run_id)
            raise self._base.not_found(run_id)
        return page

    def follow(self, run_id: str, after: int, poll_s: float) -> Follow:
        """The run's stream followed live, until the run finishes."""
        self.events(run_id, after, 1)  # fail fast on an unknown run or a bad cursor
        if not poll_s > 0:
            raise ConfigError(f"poll_s must be a positive number of seconds, got {poll_s!r}")
        return Follow(
            read=lambda cursor: self.events(run_id, cursor, 1000),
            wait=lambda timeout_s: self._base.store.wait_for_events(run_id, timeout_s),
            after=after,
            poll_s=poll_s,
        )


def _check_cursor(after: object, limit: object) -> None:
    """Refuse a cursor or limit that is not a non-negative int, saying what to pass."""
    if not isinstance(after, int) or isinstance(after, bool) or not 0 <= after <= _CURSOR_MAX:
        shown = repr(after) if len(repr(after)) <= 40 else f"{repr(after)[:40]}..."
        raise ConfigError(
            f"after must be an event cursor (an int from 0 to 2**63 - 1, e.g. a page's"
            f" .cursor), got {shown}"
        )
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= EVENTS_PAGE_MAX:
        raise ConfigError(f"limit must be an int from 1 to {EVENTS_PAGE_MAX}, got {limit!r}")
