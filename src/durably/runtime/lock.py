"""The lock of a sync run whose branches record from several threads.

A sync workflow's recording calls run in its own thread, one at a time, and need no
lock. Framework code that runs tool calls in a thread pool (``ctx.branches``, entered
from several threads at once) makes the kernel's state shared: positions, the buffered
records and events, the latch. The driver then holds this lock while it advances a
recording call and carries out its store operations, and lets it go while the step's
function runs or a retry waits, so the branches' functions still run at the same time.
It is made when the run's first ``ctx.branches`` group opens: runs without one pay
nothing.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator


class RunLock:
    """A reentrant lock that can be let go entirely around a step's function (its code
    may itself wait for branches of other threads, which need the lock)."""

    __slots__ = ("_depth", "_lock", "_owner")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owner: int | None = None
        self._depth = 0

    def __enter__(self) -> None:
        me = threading.get_ident()
        if self._owner == me:
            self._depth += 1
            return
        self._lock.acquire()
        self._owner = me
        self._depth = 1

    def __exit__(self, *exc: object) -> None:
        self._depth -= 1
        if self._depth == 0:
            self._owner = None
            self._lock.release()

    @contextlib.contextmanager
    def released(self) -> Iterator[None]:
        """Let the lock go (however deeply this thread holds it) and take it back after."""
        if self._owner != threading.get_ident():
            yield
            return
        depth = self._depth
        self._owner = None
        self._depth = 0
        self._lock.release()
        try:
            yield
        finally:
            self._lock.acquire()
            self._owner = threading.get_ident()
            self._depth = depth
