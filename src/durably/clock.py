"""Clocks: every piece of durably that needs the time asks a Clock.

Leases, timers and retry backoff read the injected clock, so tests move a
:class:`FakeClock` instead of sleeping. Workflow code never reads a clock directly: it
uses ``ctx.now()``, which is a recorded step.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol

from ._fork import reset_after_fork


class Clock(Protocol):
    """Wall-clock seconds since the epoch, and a way to wait."""

    def time(self) -> float:
        """Return the current time in seconds since the epoch."""
        ...

    def sleep(self, seconds: float) -> None:
        """Block for ``seconds`` (a fake clock advances instead)."""
        ...


class SystemClock:
    """The real clock."""

    def time(self) -> float:
        """Return ``time.time()``."""
        return time.time()

    def sleep(self, seconds: float) -> None:
        """Sleep for real."""
        if seconds > 0:
            time.sleep(seconds)


class FakeClock:
    """A clock that only moves when told to; ``sleep`` advances it at once."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = start
        self._lock = threading.Lock()
        reset_after_fork(self)

    def _after_fork_in_child(self) -> None:
        """A fresh lock: a parent thread may have been reading the time at the fork."""
        self._lock = threading.Lock()

    def time(self) -> float:
        """Return the fake current time."""
        with self._lock:
            return self._now

    def sleep(self, seconds: float) -> None:
        """Advance the clock by ``seconds`` without blocking."""
        self.advance(seconds)

    def advance(self, seconds: float) -> None:
        """Move the clock forward by ``seconds``."""
        if seconds < 0:
            raise ValueError("a clock does not move backwards; pass seconds >= 0")
        with self._lock:
            self._now += seconds
