"""The store's stream writer: one thread with a connection of its own that writes what
is handed to it in batches: the stream-only tier written at once (a streamed model
call's ``model.delta`` and ``model.restart`` events, docs/events.md "Durability
tiers"). Durable appends are batched apart, on the callers' threads and the store's
connection (:mod:`durably.store.groupcommit`).

What the stream-only tier promises:

- **Never slows the caller.** :meth:`StreamWriter.publish` appends to a bounded queue
  under a lock held for microseconds and returns; it never touches the database. When
  the queue is full (the database cannot keep up) newer events are dropped and counted
  (:attr:`StreamWriter.dropped`), never waited for; a ``model.restart`` is queued even
  then, so a follower always learns to drop an earlier attempt's text.
- **Never on the fsync path.** The writer's connection commits without a flush of its
  own (SQLite: ``synchronous=NORMAL`` in WAL mode and no checkpoints from it;
  PostgreSQL: ``synchronous_commit = off``). A later durable commit of the same database
  makes them durable as a side effect (both logs are sequential), so the stream never
  shows a hole before a committed event; a crash may lose the newest deltas, no more.
- **Batched.** Everything queued while a transaction runs goes into the next one (at
  most ``STREAM_BATCH_MAX`` events), so a fast stream costs a few commits per second,
  not one per token.
- **Fenced and ordered.** Each run's events take their cursors from the run's row under
  its lock, like every other event (the cursor rules hold: no gap, no repeat), and a
  series whose fencing token is no longer the run's is dropped (the process lost the
  run; the new owner starts a fresh series).

The backend supplies :data:`Transact`: run ``op(tx)`` as one write transaction on a
connection owned by the writer thread (opened on first use, reopened after an error).

Why a thread of its own rather than group commit's leader/follower queue: a stream-only
event has no caller waiting for its commit, so nobody would lead its batch; and its
commits must not flush, which a connection shared with durable appends cannot promise.
The queue, the batching, the fork handling and the per-run ordering here would carry a
durable tier too (items with a completion, on a flushing connection) if the store ever
moves to one writer thread.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence

from .._fork import reset_after_fork
from .._log import LazyLogger
from .._record import Record, set_field
from ..events import MODEL_RESTART, NewEvent
from ..limits import STREAM_BATCH_MAX, STREAM_QUEUE_MAX
from .tx import Backend, Tx

_log = LazyLogger("durably.store")

Transact = Callable[[Callable[[Tx], None]], None]
"""``transact(op)``: run ``op(tx)`` as one write transaction on the writer's own
connection (the backend's), raising on failure."""

# After a failed batch, the writer waits this long before the next one (a database
# that is down is not hammered; the events of the failed batch are dropped).
_FAILED_PAUSE_S = 0.2


class Pending(Record, frozen=True):
    """Stream-only events of one run on their way in, from the process holding
    ``token``."""

    __slots__ = ("events", "run_id", "token")

    run_id: str
    token: int
    events: tuple[NewEvent, ...]

    def __init__(self, run_id: str, token: int, events: tuple[NewEvent, ...]) -> None:
        set_field(self, "run_id", run_id)
        set_field(self, "token", token)
        set_field(self, "events", events)


class StreamWriter:
    """The store's writer thread for stream-only events (see the module docstring).

    Started on the first :meth:`publish`; a forked child starts its own (threads do not
    survive a fork). ``close`` writes what is queued (bounded) and stops the thread.
    """

    def __init__(self, transact: Transact, close_conn: Callable[[], None], name: str) -> None:
        self._transact = transact
        self._close_conn = close_conn
        self._name = name
        self._cond = threading.Condition(threading.Lock())
        self._queue: deque[Pending] = deque()
        self._queued = 0  # events in the queue
        self._published = 0  # events accepted so far (a flush waits for its mark)
        self._done = 0  # events written, dropped as stale, or lost to an error
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        self._closing = False
        self.dropped = 0
        """Events dropped because the queue was full (the database could not keep up)."""
        self.written = 0
        """Events written (a stale series and a failed batch are not counted)."""
        self.failed = 0
        """Events lost to a failed transaction (the database was unreachable or busy)."""
        reset_after_fork(self)

    def _after_fork_in_child(self) -> None:
        """A forked child: a fresh lock (a parent thread may have held this one at the
        fork), no thread, queue or counts of the parent's; its own writer starts on its
        first publish."""
        self._cond = threading.Condition(threading.Lock())
        self._pid = -1  # _check_fork, on the next call, forgets the rest
        self._check_fork()
        self.dropped = self.written = self.failed = 0

    def publish(self, run_id: str, token: int, events: Sequence[NewEvent]) -> None:
        """Queue ``events`` of ``run_id`` (from the process holding ``token``) for writing;
        returns at once. Nothing here raises for the database's sake."""
        if not events:
            return
        with self._cond:
            self._check_fork()
            if self._closing:
                return
            if self._queued + len(events) > STREAM_QUEUE_MAX:
                # A ``model.restart`` is kept past the bound (one per attempt of a
                # streamed call, so the queue still stays bounded): without it a follower
                # would append the next attempt's text to what it showed of the last.
                kept = tuple(e for e in events if e.kind == MODEL_RESTART)
                self.dropped += len(events) - len(kept)
                if not kept:
                    return
                events = kept
            idle = not self._queue
            self._queue.append(Pending(run_id, token, tuple(events)))
            self._queued += len(events)
            self._published += len(events)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name=f"durably-stream-writer {self._name}", daemon=True
                )
                self._thread.start()
            if idle:  # a queue with items in it was announced already: the writer drains it
                self._cond.notify()

    def flush(self, timeout_s: float) -> bool:
        """Wait until every event published before this call is written (or given up),
        at most ``timeout_s``; True when it was."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            mark = self._published
            while self._done < mark:
                left = deadline - time.monotonic()
                if left <= 0 or self._thread is None:
                    return False
                self._cond.wait(left)
        return True

    def close(self, timeout_s: float) -> None:
        """Write what is queued (waiting at most ``timeout_s``), then stop the thread and
        close its connection. Later publishes are ignored."""
        if self._pid != os.getpid():
            return  # the thread and connection are the parent's
        self.flush(timeout_s)
        with self._cond:
            self._closing = True
            thread = self._thread
            self._cond.notify_all()
        if thread is not None:
            thread.join(timeout_s)

    # -- the writer thread ---------------------------------------------------------------

    def _check_fork(self) -> None:
        """In a forked child: forget the parent's thread and queue (called locked)."""
        if self._pid == os.getpid():
            return
        self._pid = os.getpid()
        self._thread = None
        self._queue.clear()
        self._queued = self._published = self._done = 0
        self._closing = False

    def _take(self) -> list[Pending] | None:
        """The next batch (waiting for one), or None once closing with nothing left."""
        with self._cond:
            while not self._queue:
                if self._closing:
                    return None
                self._cond.wait()
            batch: list[Pending] = []
            n = 0
            while self._queue and (not batch or n + len(self._queue[0].events) <= STREAM_BATCH_MAX):
                p = self._queue.popleft()
                batch.append(p)
                n += len(p.events)
            self._queued -= n
            return batch

    def _loop(self) -> None:
        try:
            while True:
                batch = self._take()
                if batch is None:
                    return
                n = sum(len(p.events) for p in batch)
                ok = self._write(batch)
                with self._cond:
                    self._done += n
                    if ok:
                        self.written += n
                    else:
                        self.failed += n
                    self._cond.notify_all()
                if not ok:
                    time.sleep(_FAILED_PAUSE_S)
        finally:
            try:
                self._close_conn()
            except Exception:  # pragma: no cover - closing a broken connection
                pass

    def _write(self, batch: list[Pending]) -> bool:
        """One transaction for the whole batch; False (logged) when it failed."""
        try:
            self._transact(lambda tx: write_batch(tx, batch))
        except Exception as exc:
            _log.warning(
                "durably: %d stream-only event(s) of the stream writer for %s were not"
                " written (%s: %s); followers miss them, the journal is unaffected",
                sum(len(p.events) for p in batch),
                self._name,
                type(exc).__name__,
                exc,
            )
            try:
                self._close_conn()  # reopened on the next batch
            except Exception:  # pragma: no cover - closing a broken connection
                pass
            return False
        return True


def write_batch(tx: Tx, batch: Sequence[Pending]) -> None:
    """Write ``batch`` inside ``tx``: per run, its events when the run's fencing token is
    still the series' (else they are dropped: a stale owner's deltas), in publish order."""
    by_run: dict[str, list[Pending]] = {}
    for p in batch:
        by_run.setdefault(p.run_id, []).append(p)
    # Runs in one order in every process: two writers' batches never lock run rows in
    # opposite orders (no deadlock between processes on PostgreSQL).
    for run_id in sorted(by_run):
        token = tx.scalar("stream_token", run_id=run_id)
        # A repeat within the batch is written once: one statement cannot skip its own
        # earlier row by dedupe (PostgreSQL's write_events checks the stored rows).
        once: dict[str, NewEvent] = {}
        for p in by_run[run_id]:
            if p.token == token:
                for e in p.events:
                    once.setdefault(e.dedupe, e)
        if once:
            tx.events(run_id, list(once.values()))


_CREATE_LOCK = threading.Lock()


class StreamTier(Backend):
    """The stream tier of a store backend (a base class of both stores): ``publish`` and
    ``flush_stream`` of the Store protocol, over the backend's :meth:`_stream_transact`
    and :meth:`_stream_close_conn` hooks (the writer's own connection)."""

    _stream_writer: StreamWriter | None = None

    def _stream_transact(self, op: Callable[[Tx], None]) -> None:
        """Run ``op(tx)`` as one write transaction on the writer's own connection."""
        raise NotImplementedError

    def _stream_close_conn(self) -> None:
        """Close the writer's connection (opened again on the next batch)."""
        raise NotImplementedError

    def _writer(self) -> StreamWriter:
        writer = self._stream_writer
        if writer is None:
            with _CREATE_LOCK:
                writer = self._stream_writer
                if writer is None:
                    writer = StreamWriter(
                        self._stream_transact, self._stream_close_conn, self._where
                    )
                    self._stream_writer = writer
        return writer

    def publish(self, run_id: str, token: int, events: Sequence[NewEvent]) -> None:
        """Queue stream-only ``events`` of ``run_id`` for the stream writer (see
        :meth:`durably.store.base.EventsStore.publish`)."""
        self._writer().publish(run_id, token, events)

    def flush_stream(self, timeout_s: float) -> bool:
        """Wait (at most ``timeout_s``) until what was published is written."""
        writer = self._stream_writer
        return True if writer is None else writer.flush(timeout_s)

    def _close_stream(self, timeout_s: float = 2.0) -> None:
        """Write what is queued (bounded) and stop the writer: part of ``close``."""
        writer = self._stream_writer
        if writer is not None:
            writer.close(timeout_s)
