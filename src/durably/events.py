"""The run's event stream: the live read (:class:`Follow`), and the older home of the event
kinds and types (now :mod:`durably.journal.events`; ``durably.events.Event`` goes on
working).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Final

from .journal.events import APPROVAL_DECIDED as APPROVAL_DECIDED
from .journal.events import APPROVAL_REQUESTED as APPROVAL_REQUESTED
from .journal.events import EVENT_DATA_BYTES_MAX as EVENT_DATA_BYTES_MAX
from .journal.events import EVENT_KINDS as EVENT_KINDS
from .journal.events import LEASE_EXPIRED as LEASE_EXPIRED
from .journal.events import LEASE_LOST as LEASE_LOST
from .journal.events import LEASE_TAKEN as LEASE_TAKEN
from .journal.events import MODEL_DELTA as MODEL_DELTA
from .journal.events import MODEL_RESTART as MODEL_RESTART
from .journal.events import RUN_BLOCKED as RUN_BLOCKED
from .journal.events import RUN_CANCEL_REQUESTED as RUN_CANCEL_REQUESTED
from .journal.events import RUN_CANCELLED as RUN_CANCELLED
from .journal.events import RUN_COMPLETED as RUN_COMPLETED
from .journal.events import RUN_CONTINUED as RUN_CONTINUED
from .journal.events import RUN_CREATED as RUN_CREATED
from .journal.events import RUN_FAILED as RUN_FAILED
from .journal.events import RUN_HISTORY_WARNING as RUN_HISTORY_WARNING
from .journal.events import RUN_IN_DOUBT as RUN_IN_DOUBT
from .journal.events import RUN_PARKED as RUN_PARKED
from .journal.events import RUN_QUARANTINED as RUN_QUARANTINED
from .journal.events import RUN_RESUMED as RUN_RESUMED
from .journal.events import RUN_STARTED as RUN_STARTED
from .journal.events import SIGNAL_RECEIVED as SIGNAL_RECEIVED
from .journal.events import STEP_COMPLETED as STEP_COMPLETED
from .journal.events import STEP_FAILED as STEP_FAILED
from .journal.events import STEP_RETRIED as STEP_RETRIED
from .journal.events import STEP_STARTED as STEP_STARTED
from .journal.events import STREAM_ONLY_KINDS as STREAM_ONLY_KINDS
from .journal.events import USER as USER
from .journal.events import Event as Event
from .journal.events import EventKind as EventKind
from .journal.events import EventPage as EventPage
from .journal.events import NewEvent as NewEvent
from .journal.events import new_event as new_event

__all__ = [
    "APPROVAL_DECIDED",
    "APPROVAL_REQUESTED",
    "EVENT_KINDS",
    "LEASE_EXPIRED",
    "LEASE_LOST",
    "LEASE_TAKEN",
    "MODEL_DELTA",
    "MODEL_RESTART",
    "RUN_BLOCKED",
    "RUN_CANCELLED",
    "RUN_CANCEL_REQUESTED",
    "RUN_COMPLETED",
    "RUN_CONTINUED",
    "RUN_CREATED",
    "RUN_FAILED",
    "RUN_HISTORY_WARNING",
    "RUN_IN_DOUBT",
    "RUN_PARKED",
    "RUN_QUARANTINED",
    "RUN_RESUMED",
    "RUN_STARTED",
    "SIGNAL_RECEIVED",
    "STEP_COMPLETED",
    "STEP_FAILED",
    "STEP_RETRIED",
    "STEP_STARTED",
    "STREAM_ONLY_KINDS",
    "USER",
    "Event",
    "EventKind",
    "EventPage",
    "Follow",
]

#: How long a follower sleeps between reads when nothing wakes it sooner.
FOLLOW_POLL_S_DEFAULT: Final = 0.2


class Follow:
    """A live read of one run's stream, usable with both ``for`` and ``async for``.

    It yields every event after ``after`` in cursor order and stops once the run is
    finished and every event is out. ``cursor`` is the last cursor yielded: a consumer
    that stops and later calls ``engine.follow(run_id, after=follow.cursor)`` sees no
    gap and no repeat. ``read`` fetches a page after a cursor; ``wait`` blocks up to the
    given seconds or until the store says the run has new events (LISTEN/NOTIFY on
    PostgreSQL; a short poll on SQLite).
    """

    def __init__(
        self,
        read: Callable[[int], EventPage],
        wait: Callable[[float], None],
        after: int = 0,
        poll_s: float = FOLLOW_POLL_S_DEFAULT,
    ) -> None:
        self._read = read
        self._wait = wait
        self._poll_s = poll_s
        self._buffer: deque[Event] = deque()
        self._finished = False
        self.cursor = after

    def _fill(self) -> bool:
        """Read one page into the buffer; False when the stream is over."""
        page = self._read(self.cursor)
        self._buffer.extend(page.events)
        if page.finished and not page.events:
            self._finished = True
        return not self._finished

    def _take(self) -> Event:
        event = self._buffer.popleft()
        self.cursor = event.cursor
        return event

    def __iter__(self) -> Follow:
        return self

    def __next__(self) -> Event:
        while not self._buffer:
            if self._finished or not self._fill():
                raise StopIteration
            if not self._buffer:
                self._wait(self._poll_s)
        return self._take()

    def __aiter__(self) -> Follow:
        return self

    async def __anext__(self) -> Event:
        import asyncio  # lazy: keeps `import durably` fast

        while not self._buffer:
            if self._finished or not await asyncio.to_thread(self._fill):
                raise StopAsyncIteration
            if not self._buffer:
                await asyncio.to_thread(self._wait, self._poll_s)
        return self._take()
