"""Group commit for async runs: the appends of the async runs on one event loop join one
commit (issue 28; DESIGN "Durability modes": concurrent runs share commits).

The thread group commit (:mod:`durably.store.groupcommit`) batches appends made from
several threads while a commit is in progress; the async runs of one event loop write
from one thread, one after another, so each would commit alone. Here an async run's
append is queued on its loop instead, and a callback scheduled with ``call_soon`` writes
every append queued by then in one transaction (:meth:`History.append_all`): the runs
that were ready to run when the first append arrived have reached their own appends by
the time it runs. Each caller awaits its own outcome, set only after the commit that
carries its record; a stale token or a refused record fails its own append alone.

A lone run waits for nothing: while one async run (or none) drives on a store in this
loop, its appends are written at once, as before (:func:`joined` says None). Only the
real stores batch: a wrapper around one (a fault-injecting test store) is called as it
is, append by append.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..errors import StoreError
from ..journal.events import NewEvent
from ..journal.records import StepRecord
from ..store.groupcommit import Append
from ..store.history import History

if TYPE_CHECKING:
    import asyncio

    from ..store.base import Store


class LoopAppends:
    """The async runs of one store on one event loop, and their queued appends."""

    __slots__ = ("__weakref__", "loop", "queue", "runs", "store")

    def __init__(self, loop: asyncio.AbstractEventLoop, store: History) -> None:
        self.loop = loop
        self.store = store
        self.runs = 0  # async runs driving on this store in this loop now
        self.queue: list[tuple[Append, asyncio.Future[bool]]] = []

    async def append(
        self,
        run_id: str,
        token: int,
        records: Sequence[StepRecord],
        events: Sequence[NewEvent],
    ) -> bool:
        """:meth:`Store.append`, written with the appends the loop's other runs make
        before the next flush; returns once the commit carrying it is done."""
        item = Append(run_id, token, records, events, durable=True)
        fut: asyncio.Future[bool] = self.loop.create_future()
        self.queue.append((item, fut))
        if len(self.queue) == 1:
            self.loop.call_soon(self._flush)
        try:
            return await fut
        except BaseException:
            # Cancelled before its flush (a failed gather, a timeout): withdrawn, or its
            # record would be written after its caller gave up on it. One already
            # written (its future done) is in the journal, as for any cancelled write.
            if not fut.done():
                self.queue = [q for q in self.queue if q[0] is not item]
            raise

    def _flush(self) -> None:
        # A future done already was cancelled (its task's cancel cancels the future it
        # waits on at once, before the task runs again to withdraw it): not written.
        batch = [q for q in self.queue if not q[1].done()]
        self.queue = []
        if not batch:
            return  # every append queued was withdrawn
        try:
            self.store.append_all([item for item, _ in batch])
        except BaseException as exc:
            # This thread was interrupted during the commit (its outcome unknown): each
            # caller retries its own append alone, which an append sent again after an
            # unknown outcome allows (it changes nothing if committed). The interruption
            # itself goes on out of the loop.
            for _, fut in batch:
                if not fut.done():
                    fut.set_exception(_interrupted(exc))
            raise
        for item, fut in batch:
            if fut.done():
                continue  # cancelled meanwhile (its caller is gone)
            if item.error is not None:
                fut.set_exception(item.error)
            else:
                fut.set_result(item.result)


def _interrupted(exc: BaseException) -> StoreError:
    err = StoreError(
        f"the shared commit was interrupted ({type(exc).__name__}); its outcome is"
        " unknown, so this append is sent again alone"
    )
    err.transient = True
    return err


# Each loop's per-store state; a loop that is gone takes its state with it.
_LOOPS: weakref.WeakKeyDictionary[Any, dict[int, LoopAppends]] = weakref.WeakKeyDictionary()


def _state(store: Store, create: bool) -> LoopAppends | None:
    import asyncio

    if type(store).append is not History.append or not isinstance(store, History):
        return None  # a wrapper (or a store with its own append): called as it is
    loop = asyncio.get_running_loop()
    try:
        per_store = _LOOPS.get(loop)
        if per_store is None:
            if not create:
                return None
            per_store = _LOOPS[loop] = {}
    except TypeError:
        # A loop object that takes no weak reference (asyncio's and uvloop 0.23's do; a
        # loop written in C without __weakref__ would not): its appends go at once.
        return None
    state = per_store.get(id(store))
    if state is None and create:
        state = per_store[id(store)] = LoopAppends(loop, store)
    return state


class joining:
    """Around one async run's attempt on ``store``: counts it among the runs whose
    appends may share this loop's commits (a lone run's are written at once)."""

    __slots__ = ("_state", "_store")

    def __init__(self, store: Store) -> None:
        self._store = store
        self._state: LoopAppends | None = None

    def __enter__(self) -> None:
        self._state = _state(self._store, create=True)
        if self._state is not None:
            self._state.runs += 1

    def __exit__(self, *exc: object) -> None:
        state = self._state
        if state is None:
            return
        state.runs -= 1
        if state.runs == 0 and not state.queue:
            # Nothing of this store left on the loop: drop its state (it holds the store).
            per_store = _LOOPS.get(state.loop)
            if per_store is not None and per_store.get(id(state.store)) is state:
                del per_store[id(state.store)]


def joined(store: Store) -> LoopAppends | None:
    """The loop's shared-commit state for ``store`` when more than one async run drives
    on it in this loop (their appends should join), else None (write at once)."""
    state = _state(store, create=False)
    return state if state is not None and state.runs > 1 else None
