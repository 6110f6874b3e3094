"""``engine.recover()``: get this host's stranded runs going again, at startup.

Two kinds of run are stranded when a process dies:

- runs it left ``running`` (its lease says so; :func:`ownership.orphans_of_this_host`
  finds those whose owner was a process of this host that is gone);
- runs it was waiting for in-process (``engine.run`` waits for a timer holding no lease,
  so the row is ``parked`` with no owner): nothing drives them when their wake-up comes
  unless a worker runs. Every parked run of a served workflow whose wake-up is due, or
  due within :data:`RECOVER_WAIT_S` (a short timer: waited for), is resumed; a claim is
  fenced, so a worker or a waiting ``engine.run`` that takes it first is left to drive
  it (``RunLeased``, skipped).

A resumed run that parks again on a wake-up due within :data:`RECOVER_WAIT_S` is waited
for and resumed too, so recovering a run at a 2 s timer finishes it rather than leaving
it parked; later wake-ups are left parked (``RunParked`` in the results, with its reason
and wake time), for a worker or a later ``recover``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._log import LazyLogger
from .errors import DurablyError, RunLeased, RunParked
from .journal.text import utc_text
from .limits import RECOVER_WAIT_S
from .ownership import orphans_of_this_host
from .store.base import serves

RECOVER_PAGE_RUNS = 1000  # parked runs read per query while looking for due ones

if TYPE_CHECKING:
    from .clock import Clock
    from .journal.records import RunRecord
    from .store.base import Served, Store

_log = LazyLogger("durably")


def recover_runs(
    store: Store, served: Served, clock: Clock, resume: Callable[[str], Any]
) -> dict[str, Any]:
    """Resume the stranded runs (see the module docstring) with ``resume(run_id)``
    (which drives without waiting out a park) and return each run id mapped to its
    result or to the ``DurablyError`` that stopped it."""
    results: dict[str, Any] = {}
    for run in orphans_of_this_host(store, served):
        _log.info("durably: recovering run %s (its owner %s is gone)", run.run_id, run.owner)
        _resume_one(run.run_id, resume, results)
    horizon = clock.time() + RECOVER_WAIT_S
    soon = [r for r in _parked_due_by(store, served, horizon) if r.run_id not in results]
    _wait_and_resume(clock, resume, results, [(r.wake_at or 0.0, r.run_id) for r in soon])
    return results


def _resume_one(run_id: str, resume: Callable[[str], Any], results: dict[str, Any]) -> None:
    try:
        results[run_id] = resume(run_id)
    except RunLeased:
        results.pop(run_id, None)  # another process took it meanwhile: it is driven
    except DurablyError as exc:
        results[run_id] = exc


def _parked_due_by(store: Store, served: Served, horizon: float) -> list[RunRecord]:
    """Parked runs of the served workflow versions whose wake-up is due by ``horizon``,
    read a page at a time (parked runs waiting on people may be many)."""
    due: list[RunRecord] = []
    after: tuple[float, str] | None = None
    while True:
        page = store.list_runs(status="parked", limit=RECOVER_PAGE_RUNS, after=after)
        due += [
            r
            for r in page
            if r.wake_at is not None
            and r.wake_at <= horizon
            and serves(served, r.workflow, r.version)
        ]
        if len(page) < RECOVER_PAGE_RUNS:
            return due
        after = (page[-1].created_at, page[-1].run_id)


def _wait_and_resume(
    clock: Clock,
    resume: Callable[[str], Any],
    results: dict[str, Any],
    waiting: list[tuple[float, str]],
) -> None:
    """Resume each parked run of ``waiting`` (wake time, run id) and each resumed run
    that parked again, when its wake-up comes, in wake order, as long as that is within
    RECOVER_WAIT_S of the start: later ones stay parked (RunParked in ``results``)."""
    deadline = clock.time() + RECOVER_WAIT_S
    resumed_at: dict[str, float] = {}
    while True:
        again = [
            (v.wake_at, run_id)
            for run_id, v in results.items()
            if isinstance(v, RunParked)
            and v.wake_at is not None
            and v.wake_at <= deadline
            # woken at this wake time already and parked there again (a clock behind)
            and resumed_at.get(run_id) != v.wake_at
        ]
        if not waiting and not again:
            return
        wake_at, run_id = min(waiting + again)
        if (wake_at, run_id) in waiting:
            waiting.remove((wake_at, run_id))
            _log.info("durably: recovering run %s (parked, due %s)", run_id, utc_text(wake_at))
        clock.sleep(max(0.0, wake_at - clock.time()))
        resumed_at[run_id] = wake_at
        _resume_one(run_id, resume, results)
