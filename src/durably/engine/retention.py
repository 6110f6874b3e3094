"""Retention: ``engine.prune``, ``engine.delete_run``, the tombstone checks every entry
point makes, and the background pruning workers apply (``retain_finished=``).

The semantics are the store's (:mod:`durably.store.retention`): bounded batches, a run
that is not finished never touched, tombstones, and the blob mark and sweep. This room
checks the caller's arguments, turns a tombstone or a redaction into the error that says
what happened, and paces the background job.
"""

from __future__ import annotations

import datetime as _dt
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from .._log import LazyLogger
from ..errors import (
    ConfigError,
    RunNotFound,
    RunRedacted,
)
from ..history import RunRecord
from ..shell import command
from ..store.retained import MARKER_DIGEST, PRUNABLE, Freed, Redaction
from .base import Base
from .tombstones import when

log = LazyLogger("durably")

RETAIN_INTERVAL_S: Final = 60.0
"""How often a worker of an engine with ``retain_finished=`` tries to prune."""
RETAIN_RUNS_PER_TICK: Final = 200
"""The most runs one background prune deletes (the rest wait for the next interval)."""

Age = _dt.datetime | _dt.timedelta | float | int


@dataclass(frozen=True)
class PruneReport:
    """What ``engine.prune`` (or ``engine.delete_run``) removed, or with ``dry_run``
    would remove: runs (by status) and the blobs no remaining run cites."""

    runs: int
    by_status: dict[str, int]
    blobs: int
    blob_bytes: int
    dry_run: bool
    run_ids: tuple[str, ...]

    def as_json(self) -> dict[str, Any]:
        """The report as plain data (``durably prune --json``)."""
        return {
            "runs": self.runs,
            "by_status": dict(sorted(self.by_status.items())),
            "blobs": self.blobs,
            "blob_bytes": self.blob_bytes,
            "dry_run": self.dry_run,
            "run_ids": list(self.run_ids),
        }


def _report(freed: Freed, dry_run: bool) -> PruneReport:
    return PruneReport(
        freed.runs, dict(freed.by_status), freed.blobs, freed.blob_bytes, dry_run,
        tuple(freed.run_ids),
    )  # fmt: skip


def finished_before_time(
    finished_before: object, now: float, name: str = "finished_before"
) -> float:
    """``finished_before`` (a datetime, a timedelta back from now, or seconds since the
    epoch) as seconds since the epoch; a ``ConfigError`` (naming the argument ``name``)
    otherwise."""
    if isinstance(finished_before, _dt.timedelta):
        if finished_before < _dt.timedelta(0):
            raise ConfigError(f"{name}={finished_before!r}: an age must be >= 0")
        return now - finished_before.total_seconds()
    if isinstance(finished_before, _dt.datetime):
        if finished_before.tzinfo is None:
            raise ConfigError(
                f"{name}={finished_before!r} has no time zone; pass an aware"
                " datetime (datetime.now(timezone.utc) - timedelta(days=30)) or a timedelta"
            )
        return finished_before.timestamp()
    if isinstance(finished_before, (int, float)) and not isinstance(finished_before, bool):
        # NaN is no time: PostgreSQL sorts it above every number, so `finished_at < NaN`
        # would hold for every run (SQLite binds it as NULL: none).
        if math.isnan(finished_before):
            raise ConfigError(f"{name}=nan: pass a time (seconds since the epoch), not NaN")
        return float(finished_before)
    raise ConfigError(
        f"{name}={finished_before!r:.80}: pass a timedelta (an age, e.g."
        " timedelta(days=30)), an aware datetime, or seconds since the epoch"
    )


def statuses(status: str | Sequence[str] | None) -> tuple[str, ...]:
    """The statuses to prune (default: every finished one), each checked."""
    if status is None:
        return PRUNABLE
    given = [status] if isinstance(status, str) else list(status)
    bad = [s for s in given if s not in PRUNABLE]
    if bad or not given:
        raise ConfigError(
            f"status={status!r:.100}: prune takes only finished runs; choose among"
            f" {', '.join(PRUNABLE)} (a run that is not finished is never pruned)"
        )
    return tuple(dict.fromkeys(given))


def refuse_redacted(base: Base, run: RunRecord, doing: str) -> None:
    """Raise ``RunRedacted`` for a redacted run. Its input digest is the marker, so no
    other run costs a query."""
    if run.input_digest != MARKER_DIGEST:
        return
    red = base.store.get_redaction(run.run_id)
    if red is None:
        return
    raise redacted_error(red, doing)


def redacted_error(red: Redaction, doing: str) -> RunRedacted:
    """``RunRedacted`` for the run ``red`` stands for, that cannot ``doing``."""
    return RunRedacted(
        f"run {red.run_id!r} was redacted {when(red.redacted_at)} by {red.redacted_by}:"
        f" its values are gone, so it cannot {doing}; `{command('runs show', red.run_id)}`"
        " shows its shape. Start a new run for new work"
    )


def check_retain(retain_finished: object) -> None:
    """Refuse a ``retain_finished=`` that is not None or a positive timedelta."""
    if retain_finished is not None and (
        not isinstance(retain_finished, _dt.timedelta) or retain_finished <= _dt.timedelta(0)
    ):
        raise ConfigError(
            f"retain_finished={retain_finished!r:.80}: pass a timedelta > 0 (how long"
            " finished runs are kept, e.g. timedelta(days=30)) or None (kept forever)"
        )


class Retention:
    """The engine's retention room (see the module docstring)."""

    def __init__(self, base: Base, retain_finished: _dt.timedelta | None) -> None:
        self._base = base
        self.retain_finished = retain_finished
        # 32 random hex digits, as uuid4().hex gave, without importing uuid (it pulls in
        # platform: a cost of every Engine() and of every restart; issue 28).
        self._owner = os.urandom(16).hex()
        self._next_tick = 0.0

    def prune(
        self,
        finished_before: object,
        status: str | Sequence[str] | None,
        dry_run: bool,
        runs_max: int | None = None,
    ) -> PruneReport:
        """See ``Engine.prune``."""
        before = finished_before_time(finished_before, self._base.opts.clock.time())
        freed = self._base.store.prune(before, statuses(status), bool(dry_run), runs_max)
        return _report(freed, bool(dry_run))

    def delete_run(self, run_id: str, redact: bool, by: str | None) -> PruneReport:
        """See ``Engine.delete_run``."""
        self._base.known_run_id(run_id)
        if by is not None and not isinstance(by, str):
            raise ConfigError(f"by must be a str or None, got {by!r:.80}")
        who = by or "unknown"
        try:
            freed = self._base.store.delete_run(run_id, redact=bool(redact), by=who[:200])
        except RunNotFound:
            self._base.raise_if_pruned(run_id)
            raise self._base.not_found(run_id) from None
        return _report(freed, False)

    def tick(self) -> PruneReport | None:
        """One background prune, when ``retain_finished`` is set, the interval passed and
        this process holds the journal's prune lease (one pruner at a time); None when
        it did not run."""
        now = self._base.opts.clock.time()  # the engine's clock: tests move it
        if self.retain_finished is None or now < self._next_tick:
            return None
        self._next_tick = now + RETAIN_INTERVAL_S
        store = self._base.store
        if not store.take_maintenance("prune", self._owner, RETAIN_INTERVAL_S * 2):
            return None
        report = self.prune(self.retain_finished, None, False, RETAIN_RUNS_PER_TICK)
        if report.runs:
            log.info(
                "durably: pruned %d finished run(s) and %d blob(s) (retain_finished=%s)",
                report.runs,
                report.blobs,
                self.retain_finished,
            )
        return report
