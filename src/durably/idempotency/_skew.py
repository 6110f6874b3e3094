"""This host's clock against the database's, for the receiving side.

Leases and key expiry are written by the clock of the host that holds the key and compared
by whichever host reads the row, so they rely on the hosts' clocks agreeing. A replica
whose clock runs ``s`` seconds ahead would see a live request's lease expire ``s`` seconds
early and take its key over while the request still runs, performing the work twice.

On PostgreSQL (a database on another host) the store compares its injected clock with the
server's ``clock_timestamp()`` when it opens and every ``clock_check_s`` after, logs a
warning on the ``durably.idempotency`` logger past ``CLOCK_SKEW_WARN_S``
(``durably.limits``), and while this host runs ahead past that bound judges leases and
expiry on the database's clock instead (its own time minus the skew): a request alive by
the database's clock is never taken over. SQLite lives on this host, whose clock it shares:
nothing to compare.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from durably.idempotency._db import Database
from durably.limits import CLOCK_SKEW_WARN_S
from durably.redact import redact

log = logging.getLogger("durably.idempotency")

CLOCK_CHECK_S_DEFAULT = 300.0
"""How often (real seconds) a store compares its clock with the database's."""


class SkewCheck:
    """The last measured skew of ``clock`` against ``db`` (positive: this host is ahead),
    measured again at most every ``every_s`` real seconds."""

    def __init__(self, db: Database, clock: Callable[[], float], every_s: float, who: str):
        self._db = db
        self._clock = clock
        self._every_s = every_s
        self._who = who
        self._lock = threading.Lock()
        self._next_at = -float("inf")
        self.skew: float | None = None

    def check(self) -> float | None:
        """Measure the skew now (None: the database shares this host's clock)."""
        before = self._clock()
        theirs = self._db.db_time()
        if theirs is None:
            self.skew = None
            return None
        skew = (before + self._clock()) / 2 - theirs  # the middle of the round trip
        self.skew = skew
        if abs(skew) > CLOCK_SKEW_WARN_S:
            judged = (
                " judges leases and key expiry on the database's clock meanwhile and takes"
                " over no request whose lease is alive by it"
                if skew > 0
                else " sees other hosts' leases expire late (keys of dead requests stay"
                " blocked longer)"
            )
            log.warning(
                "durably: this host's clock is %+.1f s off the database's (bound %.0f s):"
                " leases and idempotency-key expiry compare times written by different"
                " hosts; the %s%s. Fix this host's clock (NTP)",
                skew,
                CLOCK_SKEW_WARN_S,
                self._who,
                judged,
            )
        return skew

    def maybe_check(self) -> None:
        """Measure again when ``every_s`` real seconds have passed since the last time
        (a failure to read the database's clock is logged; the last skew stays)."""
        with self._lock:
            if time.monotonic() < self._next_at:
                return
            self._next_at = time.monotonic() + self._every_s
        try:
            self.check()
        except Exception as exc:  # the request goes on, judged on the last skew measured
            log.warning(
                "durably: cannot read the database's clock (%s: %s)",
                type(exc).__name__,
                redact(str(exc))[:300],
            )

    def started(self) -> None:
        """The check at start (errors propagate: the database cannot be used)."""
        with self._lock:
            self._next_at = time.monotonic() + self._every_s
        self.check()

    def ahead(self) -> float:
        """How far this host runs ahead of the database past the tolerated bound, in
        seconds (0 when within it, behind, or nothing to compare)."""
        skew = self.skew
        return skew if skew is not None and skew > CLOCK_SKEW_WARN_S else 0.0
