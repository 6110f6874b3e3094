"""Settling ``ctx.gather`` branches: a wait that parked in an earlier attempt lets its
sibling branches replay first; a branch that parks does not stop its siblings; a failed
branch unwinds the others (sparing a saga's compensations).
"""

from __future__ import annotations

from typing import Any, NoReturn

from ..journal.records import APPROVAL, SIGNAL, SLEEP, WAITING
from ..limits import SETTLE_TURNS_MAX
from ..replay.kernel import RunCore
from ..replay.ops import Wait, Write
from ..replay.park import Parked
from .drive import COMPENSATING_TASKS, Executor, GatherTasks, wait_async


async def keep_branch_wait(ex: Executor, parked: Parked) -> NoReturn:
    """A timer or signal wait in a gather branch parked only its branch: the siblings go
    on live, maybe for minutes (a model call), before the gather parks the run. Its
    ``waiting`` record (the wake time or deadline, recorded once) is written now, with
    whatever else is pending, so a crash meanwhile resumes the wait at its recorded time
    instead of arming it afresh; then the branch ends parked."""
    core = ex.core
    records = core.take_pending()
    if records:
        for pause in ex.write(Write(records, core.take_events())):
            await wait_async(ex.clock, Wait(pause))
    raise parked


def parked_before(core: RunCore) -> bool:
    """Whether the wait about to take the next position of a gather branch parked in an
    earlier attempt (its ``waiting`` record is there)."""
    scope = core.scope()
    if scope is core.root or scope.member is not None:  # a ctx.branches wait is latched
        return False
    rec = core.history.get(scope.peek())
    return rec is not None and rec.status == WAITING and rec.kind in (SLEEP, SIGNAL, APPROVAL)


async def siblings_first(ex: Executor) -> None:
    """Before a gather branch's wait that parked in an earlier attempt looks at whether
    it is satisfied now: let the sibling branches (of every enclosing gather) replay what
    they recorded, until each has ended or gone live.

    The attempt that parked this wait may have ended its gather with a sibling's failure
    (the workflow caught it and went on): the replay must end the gather the same way,
    before this wait, satisfied meanwhile (its timer due, its signal sent), lets the
    branch go further than it did then, running steps it never ran or taking a signal a
    later wait was sent. Bounded by ``SETTLE_TURNS_MAX`` turns of the loop, so siblings
    that await each other outside durably never hang the run.
    """
    import asyncio

    core, gathers = ex.core, ex.gathers
    prefix = core.scope().prefix
    core.mark_live(prefix)  # siblings settling in turn need not wait for this one
    gathers.settling.add(prefix)
    try:
        for _ in range(SETTLE_TURNS_MAX):
            # Then in branch order, as the live attempt reached them: two waits for one
            # signal name take its signals first come, first served, on every replay.
            if siblings_settled(ex, prefix) and not any(
                _pos_key(p) < _pos_key(prefix) for p in gathers.settling
            ):
                return
            await asyncio.sleep(0)
    finally:
        # Once this returns, the caller's wait looks at the store before it yields to
        # the loop again, so a later sibling goes on only after it.
        gathers.settling.discard(prefix)


def _pos_key(prefix: str) -> tuple[int, ...]:
    return tuple(int(n) for n in prefix.split(".")[:-1])


def siblings_settled(ex: Executor, prefix: str) -> bool:
    """Whether every sibling of ``prefix``'s branches (at every gather level) has ended
    or gone live."""
    parts = prefix.split(".")[:-1]  # "0.1.2.0." -> ["0", "1", "2", "0"]
    for k in range(2, len(parts) + 1, 2):
        mine = ".".join(parts[:k]) + "."
        gather = ".".join(parts[: k - 1]) + "."
        depth = mine.count(".")
        for branch, task in ex.gathers.tasks.items():
            if (
                branch != mine
                and branch.startswith(gather)
                and branch.count(".") == depth
                and (
                    branch_failed(ex.core, task)
                    if task.done()
                    else not any(p.startswith(branch) for p in ex.core.gathers.went_live)
                )
            ):
                # Running its replay still, or ended with a failure: its gather is about
                # to cancel this branch (unless it returns exceptions: then the bound
                # of turns lets this wait go on).
                return False
    return True


def branch_failed(core: RunCore, task: Any) -> bool:
    """Whether a branch's task ended by raising something other than its own park."""
    if task.cancelled():
        return True
    exc = task.exception()
    return exc is not None and not local_park(core, exc)


def local_park(core: RunCore, exc: object) -> bool:
    """Whether ``exc`` is a gather branch's own park (not the run-wide latched stop)."""
    return isinstance(exc, Parked) and exc is not core.stopped


async def unwind(core: RunCore, tasks: list[Any], exc: BaseException, gathers: GatherTasks) -> None:
    """A gather ends by raising ``exc``: settle its branches first.

    After a latched park the latch stops every sibling at its next recording call; a step
    already in flight finishes and is recorded first instead of being cancelled and run
    again on wake. After a halt (cancel, budget) likewise: a step in flight is recorded (a
    saga then undoes it too) instead of being abandoned with its effect done and
    unrecorded, and a sibling's compensation is not cut short. On any other failure the
    other branches are cancelled, except a saga's compensations running in one of them
    or in a branch of a gather nested in one (``gathers``: the attempt's branch tasks).
    """
    import asyncio

    if not isinstance(exc, Parked) and not (isinstance(exc, Exception) and core.halted is not None):
        for t in tasks:
            cancel_sparing_compensations(t, gathers)
    await asyncio.gather(*tasks, return_exceptions=True)


def cancel_sparing_compensations(task: Any, gathers: GatherTasks) -> None:
    """Cancel a gather branch's task, but never a saga's compensations running in it or
    deeper down: cancelling a branch that awaits a nested gather cancels every branch of
    that gather with it, undos in flight included (the compensate marker recorded, the
    bookings left in place). Then the branches around the compensating ones are
    cancelled instead, and the way down to them is left to end by itself (its gathers
    unwind when a cancelled branch ends them, sparing the compensations again)."""
    if task in COMPENSATING_TASKS:
        return
    prefix = next((p for p, t in gathers.tasks.items() if t is task), None)
    below = (
        []
        if prefix is None
        else [(p, t) for p, t in gathers.tasks.items() if p != prefix and p.startswith(prefix)]
    )
    saving = [p for p, t in below if t in COMPENSATING_TASKS and not t.done()]
    if not saving:
        task.cancel()
        return
    for p, t in below:
        if t.done() or any(s.startswith(p) or p.startswith(s) for s in saving):
            continue  # on the way down to a compensation, or one (or inside one)
        t.cancel()


async def after_park(core: RunCore, tasks: list[Any], gathers: GatherTasks) -> list[Any]:
    """Wait for the branches still running after one parked on its own, and return every
    branch's result (its own park for those that parked). A branch that ends any other
    way than by returning or parking (a failure, a stop of the run) ends the gather as it
    would have without the park (:func:`unwind`); the parked branches' ``waiting``
    records are pending and ride with whatever write ends the attempt."""
    import asyncio

    try:
        while True:
            # Branches that ended already count too (they may all have ended before this
            # ran): one that ended otherwise than by returning or parking ends the gather.
            for t in tasks:  # in branch order, as asyncio.gather would raise
                if t.done():
                    if t.cancelled():
                        raise asyncio.CancelledError
                    exc = t.exception()
                    if exc is not None and not local_park(core, exc):
                        raise exc
            pending = [t for t in tasks if not t.done()]
            if not pending:
                break
            await asyncio.wait(pending, return_when=asyncio.FIRST_EXCEPTION)
    except BaseException as exc:
        await unwind(core, tasks, exc, gathers)
        raise
    return [t.exception() or t.result() for t in tasks]
