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
from ..errors import LeaseLost
from ..events import NewEvent
from ..history import StepRecord


class Waiter:
    """How one queued caller sleeps: a lock held from the moment it queues, released by
    the leader once its append is committed (or it is told to lead the next batch). Each
    caller is woken once, by name, instead of every queued caller re-taking one shared
    lock after every commit (a Condition's ``notify_all``: a hundred threads woken to find
    that one of them may go on)."""

    __slots__ = ("gone", "lead", "lock", "woken")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.lock.acquire()
        self.lead = False  # set (under the queue's lock) when it is to lead the next batch
        # Set just before its lock is released: a leader interrupted while waking the
        # callers of its commit wakes the rest, and none twice.
        self.woken = False
        # Set (under the queue's lock) when its caller was interrupted while a leader
        # had its appends: nobody sleeps on it any more, so should they come back to the
        # queue (that leader's own interruption) they are dropped, never told to lead.
        self.gone = False

    def wake(self) -> None:
        """Release the sleeper (once)."""
        if not self.woken:
            self.woken = True
            self.lock.release()


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
        # Whose turn the writer is while busy: the append of the caller leading (or
        # writing alone), the one told to lead next; and the appends it took. Both are
        # set under the lock in the statement that hands the writer over, so a caller
        # interrupted anywhere (a KeyboardInterrupt is raised as a call returns) finds
        # in them what it holds and gives it back (:meth:`_recover`).
        self._turn: Append | None = None
        self._taken: list[Append] = []
        self.batches = 0  # transactions that carried more than one append (for benches)
        self.batched = 0  # appends they carried

    def submit(self, item: Append) -> bool:
        """Write ``item`` (alone, or with the appends queued beside it) and return once the
        commit that carries it is done: its cancel flag, or its own error raised."""
        try:
            with self._lock:
                if not self._busy:
                    self._turn, self._busy = item, True
                    # Appends left queued with no leader (a leader's interruption with
                    # nobody to hand on to) go with this one, now.
                    self._taken, self._queue = [*self._queue, item], []
                    queued = False
                else:
                    item.waiter = Waiter()
                    self._queue.append(item)
                    queued = True
            if queued:
                item.waiter.lock.acquire()  # type: ignore[union-attr]
            if not item.done:
                if queued:
                    with self._lock:  # told to lead: the queue is ours (kept busy for us)
                        self._taken, self._queue = self._queue, []
                self._lead((item,))
        except BaseException as exc:
            # Given back here, in a loop inside this handler: a second interrupt arriving
            # while it runs (a SIGINT a millisecond after the first; CPython raises one
            # as any call begins or returns) would otherwise leave the writer held by a
            # caller that left. Each pass of _recover is safe to repeat.
            later, passes = exc, 0
            while passes < _RECOVER_PASSES:
                passes += 1
                try:
                    self._recover((item,), later)
                    break
                except BaseException as again:
                    later = again
            if later is exc:
                raise
            raise later from exc
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
        try:
            with self._lock:
                if not self._busy:
                    self._turn, self._busy = items[0], True
                    self._taken, self._queue = [*items, *self._queue], []
                    queued = False
                else:
                    # Queued as one caller: the same waiter on each item, so whichever
                    # leader takes them (a leader takes the whole queue) wakes this
                    # thread once.
                    waiter = Waiter()
                    for own in items:
                        own.waiter = waiter
                    self._queue.extend(items)
                    queued = True
            if queued:
                waiter.lock.acquire()
            if not items[0].done:
                if queued:
                    with self._lock:
                        self._taken, self._queue = self._queue, []
                self._lead(items)
        except BaseException as exc:
            # Given back here, in a loop inside this handler: a second interrupt arriving
            # while it runs (a SIGINT a millisecond after the first; CPython raises one
            # as any call begins or returns) would otherwise leave the writer held by a
            # caller that left. Each pass of _recover is safe to repeat. (Written out
            # here as in submit, not in a helper: a call into one is itself a point
            # where the second interrupt would escape before any try.)
            later, passes = exc, 0
            while passes < _RECOVER_PASSES:
                passes += 1
                try:
                    self._recover(items, later)
                    break
                except BaseException as again:
                    later = again
            if later is exc:
                raise
            raise later from exc

    def _lead(self, own: Sequence[Append]) -> None:
        """Write the appends taken (``self._taken``) as the leader, whose own appends are
        ``own``; then hand the writer on and wake each caller the commit carried. A
        failure of the transaction is every caller's error; an interruption of this
        thread (a ``BaseException``) goes to the caller's :meth:`_recover`."""
        batch = self._taken
        for mine in own:
            if mine.waiter is not None:
                mine.waiter.woken = True  # awake: it leads
        try:
            if len(batch) == 1:
                try:
                    batch[0].result = self._write_one(batch[0])
                except LeaseLost as exc:
                    # Its own refusal (a stale token), as in a batch: not an interruption
                    # of this thread (LeaseLost is a BaseException), or submit_all would
                    # raise it rather than set it on its item.
                    batch[0].error = exc
            else:
                self._write_many(batch)
                self.batches += 1
                self.batched += len(batch)
        except Exception as exc:  # the transaction failed: every caller's error
            for queued in batch:
                if queued.error is None:
                    queued.error = exc
        with self._lock:
            for queued in batch:
                queued.done = True
            self._wake(batch)
            self._taken = []
            self._hand_on()

    def _recover(self, own: Sequence[Append], exc: BaseException) -> None:
        """This caller was interrupted (a KeyboardInterrupt in the main thread, an
        injected crash, a SystemExit), anywhere from queueing to waking the callers of
        its commit: its own appends get ``exc``, and what it holds is given back.

        Holding the writer (leading, writing alone, or told to lead), it puts the other
        appends it took and did not finish back at the head of the queue for the next
        leader (an append sent again after a commit whose outcome is unknown changes
        nothing; a shared write runs again as a retry, which recognises its own committed
        work), wakes the callers of what it finished, and hands the writer on. Queued, it
        withdraws its appends, or a later leader would write them long after their caller
        gave up; ones a leader has taken are in that commit (``gone``: dropped should that
        leader be interrupted too)."""
        for mine in own:
            if not mine.done:
                mine.result, mine.error = False, exc
        with self._lock:
            rest = [q for q in self._queue if not any(q is m for m in own)]
            if self._busy and any(self._turn is m for m in own):
                if any(q.done for q in self._taken):
                    # Interrupted while marking its batch done (a SIGINT is raised at the
                    # marking loop's back edge): the write is over and every outcome was
                    # set before the first mark, so the rest are done too. Sent back
                    # instead, with their outcomes cleared, one thread's submit_all
                    # appends would be split: its one waiter woken for the marked ones
                    # (its caller told the others were written, even by a transaction
                    # that failed) and then told to lead for the rest, by nobody.
                    for queued in self._taken:
                        queued.done = True
                back = [
                    q
                    for q in self._taken
                    if not q.done
                    and not any(q is m for m in own)
                    and not (q.waiter is not None and q.waiter.gone)
                ]
                for queued in back:
                    queued.result, queued.error = False, None
                    if queued.write is not None:
                        # Its batch may have committed (an interrupt raised as the COMMIT
                        # returned: the likeliest moment, its fsync): run again, a shared
                        # write must recognise its own committed work, as on PostgreSQL's
                        # retry after a commit whose outcome is unknown (``tx.retried``):
                        # a claim is not refused as the run's lease it took, a creation
                        # still says it created the run.
                        queued.write = _retried(queued.write)
                self._wake([q for q in self._taken if q.done])
                # One statement (no call inside, so no interrupt between its parts):
                # what was taken is either still taken or back in the queue.
                self._taken, self._queue = [], [*back, *rest]
                self._hand_on()
                return
            if len(rest) == len(self._queue) and not all(m.done for m in own):
                # None queued, not all done: a leader has them.
                for mine in own:
                    if mine.waiter is not None:
                        mine.waiter.gone = True
            self._queue = rest

    def _wake(self, committed: Sequence[Append]) -> None:
        """Under the lock: wake each caller of ``committed``, once per waiter."""
        for queued in committed:
            if queued.waiter is not None:
                queued.waiter.wake()

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
                self._turn, self._busy = queued, True
                waiter.lock.release()
                return
        self._turn, self._busy = None, False


# Passes of GroupCommit._recover before giving up on it: each pass is a few microseconds,
# so only a flood of signals exhausts them.
_RECOVER_PASSES = 1000


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
