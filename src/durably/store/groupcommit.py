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
from typing import Any

from .._record import Record
from ..events import NewEvent
from ..history import StepRecord


class Waiter:
    """How one queued caller sleeps: a lock held from the moment it queues, released by
    the leader once its append is committed (or it is told to lead the next batch). Each
    caller is woken once, by name, instead of every queued caller re-taking one shared
    lock after every commit (a Condition's ``notify_all``: a hundred threads woken to find
    that one of them may go on)."""

    __slots__ = ("gone", "lead", "lock")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.lock.acquire()
        self.lead = False  # set (under the queue's lock) when it is to lead the next batch
        # Set (under the queue's lock) when its caller was interrupted while a leader
        # had its appends: nobody sleeps on it any more, so should they come back to the
        # queue (that leader's own interruption) they are dropped, never told to lead.
        self.gone = False


class Append(Record, eq=False):
    """One caller's append, queued: its arguments, then its outcome.

    Or (``write`` set, no records) a run's other write on the step path's way (its
    creation, claim or finish: :meth:`~durably.store.tx.Backend._shared_write`): a
    transaction body run in the shared transaction, its own savepoint around it, whose
    return value is ``value``."""

    __slots__ = (
        "done",
        "durable",
        "error",
        "events",
        "records",
        "result",
        "run_id",
        "token",
        "value",
        "waiter",
        "write",
    )

    run_id: str
    token: int
    records: Sequence[StepRecord]
    events: Sequence[NewEvent]
    durable: bool
    result: bool
    error: BaseException | None
    done: bool
    waiter: Waiter | None
    write: Callable[[Any], Any] | None
    value: Any

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
        waiter: Waiter | None = None,
        write: Callable[[Any], Any] | None = None,
        value: Any = None,
    ) -> None:
        self.run_id = run_id
        self.token = token
        self.records = records
        self.events = events
        self.durable = durable
        self.result = result
        self.error = error
        self.done = done
        self.waiter = waiter
        self.write = write
        self.value = value


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
        self._lock = threading.Lock()
        self._queue: list[Append] = []
        self._busy = False
        self.batches = 0  # transactions that carried more than one append (for benches)
        self.batched = 0  # appends they carried

    def submit(self, item: Append) -> bool:
        """Write ``item`` (alone, or with the appends queued beside it) and return once the
        commit that carries it is done: its cancel flag, or its own error raised."""
        waiter: Waiter | None = None
        try:
            with self._lock:
                if not self._busy:
                    self._busy = True
                    # Appends left queued with no leader (a leader's interruption with
                    # nobody to hand on to) go with this one, now.
                    batch = [*self._queue, item] if self._queue else None
                    self._queue = []
                else:
                    waiter = Waiter()
                    # From here an interrupt withdraws the append: one raised as the
                    # queue's append returns (a SIGINT that arrived under the lock)
                    # would leave it queued with nobody on its waiter, to be told to
                    # lead by the end of the commit in progress, and the writer busy
                    # for a leader that never comes.
                    item.waiter = waiter
                    self._queue.append(item)
                    batch = None
            if waiter is not None:
                waiter.lock.acquire()
        except BaseException:
            if waiter is not None:
                self._withdraw([item], waiter)
            raise
        if item.waiter is not None:
            if item.done:
                return _outcome(item)
            with self._lock:  # told to lead: the queue is ours (busy was kept for us)
                batch, self._queue = self._queue, []
        if batch is None:
            # Alone: exactly the write without group commit (the step path's own cost).
            try:
                return self._write_one(item)
            finally:
                self._release([])
        self._lead(batch, item)
        return _outcome(item)

    def _sleep(self, item: Append, waiter: Waiter) -> None:
        """Block until ``item`` is committed or its caller is told to lead."""
        try:
            waiter.lock.acquire()
        except BaseException:
            self._withdraw([item], waiter)
            raise

    def _withdraw(self, items: Sequence[Append], waiter: Waiter) -> None:
        """``items``' caller was interrupted while queued (a KeyboardInterrupt in the main
        thread): withdraw them, or a later leader would write them long after their
        caller gave up; ones a leader already took are in its commit (should that leader
        be interrupted too, they are dropped: ``gone``). Told to lead meanwhile, it
        hands the lead on."""
        with self._lock:
            if not items[0].done:
                left = [q for q in self._queue if not any(q is m for m in items)]
                if len(left) == len(self._queue):
                    waiter.gone = True  # none queued: a leader has them
                self._queue = left
                if waiter.lead:
                    self._hand_on()

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
        waiter: Waiter | None = None
        try:
            with self._lock:
                if self._busy:
                    # Queued as one caller: the same waiter on each item, so whichever
                    # leader takes them (a leader takes the whole queue) wakes this
                    # thread once.
                    waiter = Waiter()
                    for own in items:
                        own.waiter = waiter
                    self._queue.extend(items)
                else:
                    self._busy = True
                    batch, self._queue = [*items, *self._queue], []
            if waiter is not None:
                waiter.lock.acquire()
        except BaseException:
            if waiter is not None:  # an interrupt as it queued or slept (see submit)
                self._withdraw(items, waiter)
            raise
        if waiter is not None:
            if items[0].done:
                return
            with self._lock:
                batch, self._queue = self._queue, []
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
                if queued.write is not None:
                    # Its batch may have committed (an interrupt raised as the COMMIT
                    # returned: the likeliest moment, its fsync): run again, a shared
                    # write must recognise its own committed work, as on PostgreSQL's
                    # retry after a commit whose outcome is unknown (``tx.retried``):
                    # a claim is not refused as the run's lease it took, a creation
                    # still says it created the run.
                    queued.write = _retried(queued.write)
            interrupted = exc
        finally:
            for queued in batch:
                if not any(q is queued for q in again):
                    queued.done = True
            self._release([q for q in batch if q.done], again)
        if interrupted is not None and item is None:
            raise interrupted

    def _release(self, committed: list[Append], again: Sequence[Append] = ()) -> None:
        """End a commit: hand the lead to the oldest queued caller (or leave the writer
        idle), then wake each committed caller, once per waiter."""
        with self._lock:
            for queued in again:
                if queued.waiter is not None and queued.waiter.gone:
                    queued.done = True  # its caller gave up on it (see Waiter.gone)
            self._queue[:0] = [q for q in again if not q.done]
            self._hand_on()
        woken: set[int] = set()
        for queued in committed:
            waiter = queued.waiter
            if waiter is not None and id(waiter) not in woken:
                woken.add(id(waiter))
                waiter.lock.release()

    def _hand_on(self) -> None:
        """Under the lock: the oldest queued caller leads next, woken now, with the writer
        kept busy for it; nobody queued (or nobody to wake): the writer is idle."""
        # The next batch starts as soon as one thread wakes: the writer stays busy, so an
        # arriving caller queues behind it rather than writing alone while the queued
        # ones wait (100 runs made fewer steps a second than 10 that way).
        for queued in self._queue:
            waiter = queued.waiter
            if waiter is not None:
                waiter.lead = True
                waiter.lock.release()
                self._busy = True
                return
        self._busy = False


class _RetriedTx:
    """A transaction seen by a write run again after a commit whose outcome is unknown to
    it (``retried`` True, everything else the transaction's own)."""

    __slots__ = ("_tx",)
    retried = True

    def __init__(self, tx: Any) -> None:
        self._tx = tx

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tx, name)


def _retried(write: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda tx: write(_RetriedTx(tx))


def _outcome(item: Append) -> bool:
    if item.error is not None:
        raise item.error
    return item.result
