"""Group commit: appends of concurrent runs in one process share one transaction and one
fsync (DESIGN "Durability modes": concurrent runs share commits; no record is
acknowledged before its commit).

Leader and followers, no thread of its own: a caller that finds no commit in progress
writes its own append at once, exactly as without group commit (a lone run waits for
nothing more). Callers that arrive while a commit is in progress queue their appends;
when it ends, the first caller to find no commit in progress (one of them, woken, or a
caller just arriving) takes every queued append and writes them all in one transaction
(the backend's ``write_many``), then releases each caller with its own outcome. Each
caller is released only after the commit that carries its record, and a record that
fails on its own (a stale fencing token, an overwrite) fails alone: the
backend rolls it back to its savepoint and the others commit. A failure of the
transaction itself (busy, a full disk) is every queued caller's error, and each retries
as it would have alone.

The queue is per store and per process: a forked child gets a fresh one
(:meth:`GroupCommit.reset`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from .._record import Record
from ..events import NewEvent
from ..history import StepRecord


class Append(Record, eq=False):
    """One caller's append, queued: its arguments, then its outcome."""

    __slots__ = ("done", "durable", "error", "events", "records", "result", "run_id", "token")

    run_id: str
    token: int
    records: Sequence[StepRecord]
    events: Sequence[NewEvent]
    durable: bool
    result: bool
    error: BaseException | None
    done: bool

    def __init__(
        self,
        run_id: str,
        token: int,
        records: Sequence[StepRecord],
        events: Sequence[NewEvent],
        durable: bool,
        result: bool = False,
        error: BaseException | None = None,
        done: bool = False,
    ) -> None:
        self.run_id = run_id
        self.token = token
        self.records = records
        self.events = events
        self.durable = durable
        self.result = result
        self.error = error
        self.done = done


WriteOne = Callable[[Append], bool]
"""Write one append in a transaction of its own; returns whether a cancel was asked for."""
WriteMany = Callable[[Sequence[Append]], None]
"""Write every append in one transaction, setting each one's ``result`` or ``error`` (a
failure of one append alone); raises when the transaction itself fails."""


class GroupCommit:
    """The leader/follower queue of one store (see the module docstring)."""

    def __init__(self, write_one: WriteOne, write_many: WriteMany) -> None:
        self._write_one = write_one
        self._write_many = write_many
        self.reset()

    def reset(self) -> None:
        """A fresh queue and lock (a forked child: the parent's threads are not here)."""
        # Held as ``with self._lock`` (C code) rather than ``with self._cond`` (two Python
        # calls a side): every step's append takes it twice. The same lock either way.
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._queue: list[Append] = []
        self._busy = False
        self.batches = 0  # transactions that carried more than one append (for benches)
        self.batched = 0  # appends they carried

    def submit(self, item: Append) -> bool:
        """Write ``item`` (alone, or with the appends queued beside it) and return once the
        commit that carries it is done: its cancel flag, or its own error raised."""
        cond = self._cond
        with self._lock:
            if not self._busy:
                self._busy = True
                # Appends queued while the last commit ran go with this one, now: their
                # callers were woken, but waking a hundred threads takes far longer than a
                # step, and a caller that wrote alone here instead kept the writer busy
                # again before any of them ran (the same thread, commit after commit,
                # while they went back to sleep: 100 runs did fewer steps a second than
                # 10).
                batch = [*self._queue, item] if self._queue else None
                self._queue = []
            else:
                self._queue.append(item)
                try:
                    while self._busy and not item.done:
                        cond.wait()
                except BaseException:
                    # Interrupted while queued (a KeyboardInterrupt in the main thread):
                    # withdraw the append, or a later leader would write it long after its
                    # caller gave up on it. One a leader already took is in its commit.
                    if not item.done and any(q is item for q in self._queue):
                        self._queue = [q for q in self._queue if q is not item]
                        if not self._busy and self._queue:
                            cond.notify_all()  # it may have been the one to lead next
                    raise
                if item.done:
                    return _outcome(item)
                self._busy = True
                batch, self._queue = self._queue, []  # the next leader: take them all
        if batch is None:
            # Alone: exactly the write without group commit (the step path's own cost).
            try:
                return self._write_one(item)
            finally:
                with self._lock:
                    self._busy = False
                    if self._queue:  # callers that queued meanwhile: one of them leads
                        cond.notify_all()
        self._lead(batch, item)
        return _outcome(item)

    def submit_all(self, items: Sequence[Append]) -> None:
        """Write ``items``, several callers' appends gathered by one thread (the async
        runs of one event loop, :mod:`durably.runtime.joincommit`), in one transaction
        with any appends queued beside them, once no commit is in progress; returns once
        it is committed, with each item's ``result`` or ``error`` set (a stale token fails
        its item alone). A ``BaseException`` of this thread during the write (a
        KeyboardInterrupt) is raised, with every item's ``error`` set to it; the other
        threads' appends go back to the queue."""
        if not items:
            return
        cond = self._cond
        with self._lock:
            while self._busy:
                cond.wait()
            self._busy = True
            batch, self._queue = [*items, *self._queue], []
        self._lead(batch, None, mine=items)

    def _lead(self, batch: list[Append], item: Append | None, mine: Sequence[Append] = ()) -> None:
        """Write ``batch`` as the leader: ``item`` is the leader's own append (None for
        :meth:`submit_all`, whose appends are ``mine``); releases every other caller."""
        again: list[Append] = []
        interrupted: BaseException | None = None
        try:
            if len(batch) == 1:
                batch[0].result = self._write_one(batch[0])
            else:
                self._write_many(batch)
                self.batches += 1
                self.batched += len(batch)
        except Exception as exc:  # the transaction failed: every caller's error
            for queued in batch:
                if queued.error is None:
                    queued.error = exc
        except BaseException as exc:
            # The leader's own interruption (a KeyboardInterrupt, an injected crash, a
            # SystemExit) is not the others' error: their appends go back to the queue
            # for the next leader (an append sent again after a commit whose outcome is
            # unknown changes nothing), and only this caller raises it (submit_all: with
            # each of its own appends).
            if item is not None:
                item.error = exc
            for own in mine:
                own.result, own.error = False, exc
            again = [q for q in batch if q is not item and not any(q is m for m in mine)]
            for queued in again:
                queued.result, queued.error = False, None
            interrupted = exc
        finally:
            with self._lock:
                for queued in batch:
                    queued.done = not any(q is queued for q in again)
                self._queue[:0] = again
                self._busy = False
                self._cond.notify_all()
        if interrupted is not None and item is None:
            raise interrupted


def _outcome(item: Append) -> bool:
    if item.error is not None:
        raise item.error
    return item.result
