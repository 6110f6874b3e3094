"""Retrying a store call that failed for a transient reason, with bounded backoff.

The retry loop is a generator that yields how long to wait before the next attempt, so
the sync driver waits on the engine's clock and the async driver awaits, with one
implementation; a test on a fake clock never sleeps.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import TypeVar

from ..clock import Clock
from ..errors import StoreError

T = TypeVar("T")

STORE_RETRY_S_DEFAULT = 10.0
"""How long, in waits summed, a recording call retries a transient store error."""
STORE_RETRY_FIRST_S = 0.05
STORE_RETRY_DELAY_MAX_S = 2.0


def attempts(op: Callable[[], T], budget_s: float) -> Generator[float, None, T]:
    """Call ``op``; after a transient :class:`StoreError` yield the delay to wait, then call
    it again. Returns ``op``'s value; raises the error when it is permanent or when the
    waits would pass ``budget_s`` in total."""
    waited = 0.0
    delay = STORE_RETRY_FIRST_S
    while True:
        try:
            return op()
        except StoreError as exc:
            import random  # on a transient failure only: not a cost of every start

            # Full jitter on the upper half: many processes retrying one database spread out.
            pause = delay * (0.5 + random.random() / 2)
            if not exc.transient or waited + pause > budget_s:
                raise
        yield pause
        waited += pause
        delay = min(delay * 2, STORE_RETRY_DELAY_MAX_S)


def call(op: Callable[[], T], clock: Clock, budget_s: float) -> T:
    """:func:`attempts` waiting on ``clock`` (for code that is not on an event loop)."""
    gen = attempts(op, budget_s)
    while True:
        try:
            pause = next(gen)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        clock.sleep(pause)
