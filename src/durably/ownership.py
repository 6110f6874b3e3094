"""Judging a run's owner from outside: alive, provably dead, or only dead-looking.

Three verdicts, from strongest to weakest evidence:

- *provably dead*: the owner is a process of this host (same machine, boot and pid
  namespace) and its pid is gone or belongs to a newer process. Its runs are taken over at
  once and ``engine.recover()`` resumes them.
- *dead-looking*: the owner is on another host and nothing shows it alive: on PostgreSQL
  its session advisory lock is free; SQLite has no such lock, so an owner on another host
  never shows life there. A free lock alone proves nothing (a dropped connection frees it),
  so a dead-looking owner's run is taken only when its lease expires; ``engine.run`` waits
  for that instead of failing at once.
- *alive*: everything else (a live pid here, a held lock there).

This module also holds the clock check of workers: leases and key expiry compare times
written by different hosts, so a worker compares its clock with the database's.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._log import LazyLogger
from .clock import Clock
from .history import RunRecord
from .journal.text import clock_text
from .limits import CLOCK_SKEW_WARN_S as CLOCK_SKEW_WARN_S
from .limits import RECOVER_SCAN_MAX as RECOVER_SCAN_MAX
from .store.base import Served, Store, serves
from .store.owner import Owner

log = LazyLogger("durably")

# CLOCK_SKEW_WARN_S (durably.limits) is the skew a check warns about; this is how often.
CLOCK_CHECK_EVERY_S = 300.0


def owner_dead(owner: str) -> bool:
    """True when ``owner`` (an owner string from the journal) is provably dead."""
    parsed = Owner.parse(owner)
    return parsed is not None and parsed.provably_dead()


def describe_owner(owner: str | None) -> tuple[str, int | None]:
    """The owner's host label and pid for people; ``("?", None)`` for a string that is
    not an owner (a crafted or foreign value is shown, never trusted)."""
    parsed = Owner.parse(owner) if owner is not None else None
    if parsed is None:
        return ("" if owner is None else "?", None)
    return parsed.host, parsed.pid


def orphaned(run: RunRecord, now: float) -> bool:
    """True when a running run has nobody driving it: no owner, an expired lease, or an
    owner that is provably dead."""
    if run.status != "running":
        return False
    if run.owner is None or run.lease_expires_at is None or run.lease_expires_at <= now:
        return True
    return owner_dead(run.owner)


@dataclass(frozen=True)
class LeaseWait:
    """Why and until when ``engine.run`` waits for another host's lease."""

    run_id: str
    owner: str
    token: int
    until: float

    def message(self) -> str:
        """The sentence logged before waiting."""
        host, pid = describe_owner(self.owner)
        # With the date when it is not today's: a lease running past midnight UTC (or
        # a skewed owner's clock) would otherwise read as a time already past.
        when = clock_text(self.until)
        return (
            f"run {self.run_id!r} is leased by pid {pid} on host {host!r} until {when};"
            " that owner looks dead (nothing shows it alive from here) but is on another"
            " host, so it cannot be proven dead: waiting for its lease to expire before"
            " resuming (Engine(..., wait_for_lease=False) raises RunLeased at once instead)"
        )


def lease_wait(store: Store, run: RunRecord, waited: LeaseWait | None) -> LeaseWait | None:
    """How long to wait for ``run``'s lease, or None to raise ``RunLeased`` now.

    Waiting is only for a dead-looking owner on another host, and only once: a live owner
    on this host (another thread or process driving the run) is refused at once, and an
    owner whose lease was renewed or taken by someone else while we waited is alive.
    """
    if run.owner is None or run.lease_expires_at is None or waited is not None:
        return None
    holder = Owner.parse(run.owner)
    if holder is not None and holder.same_host():
        return None  # a live process here: a dead one would have been taken over
    if run.owner not in store.owners_without_lock([run.owner]):
        return None  # its advisory lock is held: alive
    return LeaseWait(run.run_id, run.owner, run.fencing_token, run.lease_expires_at)


def orphans_of_this_host(store: Store, served: Served) -> list[RunRecord]:
    """Running runs of the workflow versions in ``served`` (as workers route them: a run
    of a version not registered here is left to a process that registers it) whose owner
    was a process of this host that is gone (provably dead, or of an earlier boot of this
    machine: those are resumed once their leases expire, see :func:`lease_wait`), oldest
    first. Every running run is looked at, ``RECOVER_SCAN_MAX`` per query (keyset
    pages: a run created meanwhile never makes one repeat or go missing)."""
    found: list[RunRecord] = []
    after: tuple[float, str] | None = None
    while True:
        page = store.list_runs(status="running", limit=RECOVER_SCAN_MAX, after=after)
        found += [
            r
            for r in page
            if serves(served, r.workflow, r.version) and r.owner and _was_ours(r.owner)
        ]
        if len(page) < RECOVER_SCAN_MAX:
            return sorted(found, key=lambda r: (r.created_at, r.run_id))
        after = (page[-1].created_at, page[-1].run_id)


def _was_ours(owner: str) -> bool:
    parsed = Owner.parse(owner)
    return parsed is not None and (parsed.provably_dead() or parsed.earlier_boot_here())


def check_clock(store: Store, clock: Clock) -> float | None:
    """Compare ``clock`` with the database's clock; warn (``durably`` logger) when they
    differ by more than ``CLOCK_SKEW_WARN_S``. Returns the skew in seconds (positive:
    this host is ahead), or None when the store has no clock of its own (SQLite: the
    same host's clock)."""
    before = clock.time()
    theirs = store.db_time()
    if theirs is None:
        return None
    mine = (before + clock.time()) / 2  # the middle of the round trip
    skew = mine - theirs
    if abs(skew) > CLOCK_SKEW_WARN_S:
        log.warning(
            "durably: this host's clock is %+.1f s off the database's (bound %.0f s):"
            " leases and idempotency-key expiry compare times written by different hosts,"
            " so runs may be taken over early or late; fix the clock (NTP)",
            skew,
            CLOCK_SKEW_WARN_S,
        )
    return skew
