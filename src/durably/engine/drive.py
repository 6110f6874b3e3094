"""The drive loops: a run driven to its end in this process (sync, or on a running event
loop), the in-process wait while it is parked, and following a run another process
drives.

While a run parks, ``engine.run`` waits here holding nothing (no lease, no row lock) and
replays it when due; when another process took it first, it follows that run to its end.
"""

from __future__ import annotations

import functools
import math
from typing import Any

from .._log import INFO, WARNING, LazyLogger
from ..clock import SystemClock
from ..context import AsyncContext, Context, workflow_body
from ..errors import RunLeased, RunParked
from ..features import budgets
from ..history import PARKED, QUEUED, RUNNING, RunRecord
from ..limits import LEASE_WAIT_MAX_S
from ..ownership import LeaseWait, describe_owner, lease_wait, owner_dead
from ..runtime.drive import drive_async, drive_sync
from ..runtime.joincommit import joining
from .attempt import Attempt, Attempts, RunContinued
from .base import Base
from .registry import Registry, Workflow
from .retention import refuse_redacted

LEASE_WAIT_SLACK_S = 0.05  # past the lease's expiry, so the claim after the wait finds it over
PARK_WAIT_SLICE_S = 1.0  # longest real-time wait between looks at a parked run's row
FOLLOW_POLL_S = 0.05  # between looks at a run another process is driving (engine.run)

_log = LazyLogger("durably")


def _held(run: RunRecord, now: float) -> bool:
    """Whether another owner may be driving ``run``: running under an unexpired lease of
    an owner not provably dead."""
    return (
        run.status == RUNNING
        and run.owner is not None
        and run.lease_expires_at is not None
        and run.lease_expires_at > now
        and not owner_dead(run.owner)
    )


def _following(run: RunRecord) -> str:
    """The line logged before following a live owner's run."""
    host, pid = describe_owner(run.owner)
    return (
        f"durably: run {run.run_id!r} is being driven by pid {pid} on host {host!r};"
        " following it to its end (Engine(..., wait_for_lease=False) raises RunLeased"
        " at once instead)"
    )


class Driver:
    """Drives runs: to their end in this process, or one claimed attempt (workers)."""

    def __init__(self, base: Base, registry: Registry, attempts: Attempts) -> None:
        self._base = base
        self._registry = registry
        self.attempts = attempts

    def resume(self, run_id: str, wait: bool, live: bool = True) -> Any:
        """Drive an existing run with its recorded input (``wait``: in-process while it
        is parked, else ``RunParked``; ``live``: follow a live owner's run, else
        ``RunLeased``)."""
        run = self._base.get_run(run_id)
        refuse_redacted(self._base, run, "be resumed")
        return self.drive_to_end(self._registry.for_run(run), run, wait, live)

    def execute_claimed(self, run: RunRecord) -> Any:
        """Drive a run this process has just claimed (for workers)."""
        w = self._registry.for_run(run)
        if w.is_async:
            import asyncio

            return asyncio.run(self.drive_async(w, run, claimed=True))
        return self.drive_sync(w, run, claimed=True)

    def drive_to_end(
        self, w: Workflow, run: RunRecord, wait: bool = True, follow_live: bool = True
    ) -> Any:
        """Drive ``run`` until it ends; while it parks, wait in this process until it is
        due (:meth:`await_wake`) and replay it (unless ``wait`` is off: RunParked).
        While another owner holds its lease, follow that owner's run (:meth:`follow`;
        ``follow_live`` off: only a dead-looking owner's lease is waited for)."""
        # True once this call waited for the run, or when it found the run queued: a
        # worker serving the workflow may claim it first (between engine.run creating the
        # run and claiming it), and then this call follows it to its end.
        followed = run.status == QUEUED
        while True:
            if wait and run.status == PARKED:
                run = self.await_wake(run)
                followed = True
            try:
                if w.is_async:
                    import asyncio

                    return asyncio.run(self.drive_async(w, run))
                return self.drive_sync(w, run)
            except RunParked:
                if not wait:
                    raise
                run = self._base.get_run(run.run_id)
            except RunLeased as leased:
                if not (followed or self._base.opts.wait_for_lease):
                    raise
                # Another process drives the run: follow it to its end.
                run = self.follow(run.run_id, leased, live=follow_live)
            followed = True

    async def drive_to_end_async(self, w: Workflow, run: RunRecord) -> Any:
        """:meth:`drive_to_end` on the running event loop: the waits run in a thread."""
        import asyncio

        followed = run.status == QUEUED  # see drive_to_end
        while True:
            if run.status == PARKED:
                run = await asyncio.to_thread(self.await_wake, run)
                followed = True
            try:
                if w.is_async:
                    return await self.drive_async(w, run)
                return self.drive_sync(w, run)
            except RunParked:
                run = await asyncio.to_thread(self._base.get_run, run.run_id)
            except RunLeased as leased:
                if not (followed or self._base.opts.wait_for_lease):
                    raise
                run = await asyncio.to_thread(self.follow, run.run_id, leased)
            followed = True

    def await_wake(self, run: RunRecord) -> RunRecord:
        """Wait while ``run`` is parked and not due, for at most ``park_wait_s``; return
        its row once due or no longer parked (claimed by a worker, cancelled, finished).
        Past the bound, raise ``RunParked`` (the run stays parked).

        Nothing is held meanwhile: no lease, no row lock. On the real clock the wait is
        sliced (at most PARK_WAIT_SLICE_S) into waits for the run's events, so a
        PostgreSQL NOTIFY (a signal, a cancel) ends a slice at once and SQLite looks again
        within a second; on an injected clock (tests) the clock sleeps to the wake time.
        """
        base, opts = self._base, self._base.opts
        clock = opts.clock
        deadline = None if opts.park_wait_s is None else clock.time() + opts.park_wait_s
        real = isinstance(clock, SystemClock)
        run_id = run.run_id
        told = False
        while run.status == PARKED:
            now = clock.time()
            wake = run.wake_at
            if wake is not None and math.isnan(wake):
                # A hand-edited row (PostgreSQL keeps NaN, which no claim finds due): no
                # wake time, so the waits below are slices, not a loop of zero waits.
                wake = None
            if wake is not None and wake <= now:
                break
            if deadline is not None and now >= deadline:
                raise RunParked(run.run_id, run.park_reason or "parked", wake)
            if not told:
                _log.info(
                    "durably: run %s is parked (%s); waiting in this process",
                    run.run_id,
                    run.park_reason or "no reason recorded",
                )
                told = True
            until = min(
                math.inf if wake is None else wake,
                math.inf if deadline is None else deadline,
            )
            if not real and math.isfinite(until):
                clock.sleep(until - now)
            else:
                slice_s = min(PARK_WAIT_SLICE_S, max(0.0, until - now))
                base.call(functools.partial(base.store.wait_for_events, run_id, slice_s))
            run = base.call(functools.partial(base.get_run, run_id))
        return run

    def follow(self, run_id: str, leased: RunLeased, live: bool = True) -> RunRecord:
        """Wait while another owner holds the run's lease; return the run's row once no
        one does (it ended, parked, was given back, or the lease ran out: the caller
        claims it then, or returns its outcome).

        A live owner (a process of this host, a lock held on PostgreSQL) is followed to
        the end of its run, however long (``live`` off: ``leased`` is raised instead, as
        ``recover()`` leaves a run another process took to it). A dead-looking owner on
        another host (nothing shows it alive, but it cannot be proven dead) is waited for
        until its lease expires, saying why and until when; a run that ends meanwhile
        ends the wait at once. The row is looked at every ``FOLLOW_POLL_S`` (a NOTIFY of
        the run's events wakes the look on PostgreSQL). On an injected clock a
        dead-looking owner's lease is slept out on the clock instead (tests). A lease
        ending further ahead than any lease durably writes is a hand-edited row, not an
        owner to wait for: ``leased`` is raised.
        """
        base, opts = self._base, self._base.opts
        clock = opts.clock
        real = isinstance(clock, SystemClock)
        seen: tuple[str, int] | None = None
        waited: LeaseWait | None = None
        run = base.get_run(run_id)
        while True:
            now = clock.time()
            if not _held(run, now):
                return run
            assert run.owner is not None and run.lease_expires_at is not None
            left = run.lease_expires_at - now
            if not left <= max(LEASE_WAIT_MAX_S, opts.lease_s):
                raise leased  # no lease durably writes ends that far ahead (or never)
            if seen != (run.owner, run.fencing_token):
                if seen is not None and not live:
                    raise leased  # taken by another owner meanwhile: alive
                seen = (run.owner, run.fencing_token)
                waited = lease_wait(base.store, run, None)
                if waited is None and not live:
                    raise leased
                _log.log(
                    WARNING if waited else INFO,
                    "%s",
                    waited.message() if waited else _following(run),
                )
            elif not live and waited is not None and run.lease_expires_at != waited.until:
                raise leased  # renewed while we waited: alive
            if waited is not None and not real:
                clock.sleep(left + LEASE_WAIT_SLACK_S)
            else:
                slice_s = min(FOLLOW_POLL_S, left + LEASE_WAIT_SLACK_S)
                base.call(functools.partial(base.store.wait_for_events, run_id, slice_s))
            run = base.call(functools.partial(base.get_run, run_id))

    def drive_sync(self, w: Workflow, run: RunRecord, claimed: bool = False) -> Any:
        """One attempt of a sync workflow (or a sync one with ``claimed``), to its
        outcome; a generation that continues as new is followed by the next one's
        attempt at once, under the same claim, to the final generation's outcome."""
        while True:
            try:
                return self._attempt_sync(w, run, claimed)
            except RunContinued as cont:
                run, claimed = cont.run, True

    def _attempt_sync(self, w: Workflow, run: RunRecord, claimed: bool) -> Any:
        att = self.attempts.begin(w, run, claimed)
        if not isinstance(att, Attempt):
            return att.value
        try:
            if w.budget is not None:
                drive_sync(att.executor, budgets.set_budget(att.core, w.budget))
            ctx = Context(att.core, att.executor)
            with workflow_body(ctx):
                result = w.fn(ctx, *att.args, **att.kwargs)
        except BaseException as exc:
            self.attempts.conclude_error(att, exc)
            raise
        return self.attempts.conclude(att, result)

    async def drive_async(self, w: Workflow, run: RunRecord, claimed: bool = False) -> Any:
        """One attempt on the running event loop (a sync workflow runs inline); a
        generation that continues as new is followed by the next one's (see
        :meth:`drive_sync`). From its claim to its end the run counts among the loop's
        async runs, whose appends share commits (:mod:`durably.runtime.joincommit`)."""
        with joining(self._base.store):
            while True:
                try:
                    return await self._drive_async(w, run, claimed)
                except RunContinued as cont:
                    run, claimed = cont.run, True

    async def _drive_async(self, w: Workflow, run: RunRecord, claimed: bool) -> Any:
        import asyncio

        attempts = self.attempts
        # Claiming and concluding may wait out a failing store (retry backoff, up to
        # store_retry_s; a dead owner's lease): in a worker thread, so the event loop and
        # the other runs on it go on meanwhile.
        att = await asyncio.to_thread(attempts.begin, w, run, claimed)
        if not isinstance(att, Attempt):
            return att.value
        try:
            if w.budget is not None:
                await drive_async(att.executor, budgets.set_budget(att.core, w.budget))
            if w.is_async:
                actx = AsyncContext(att.core, att.executor)
                with workflow_body(actx):
                    result = await w.fn(actx, *att.args, **att.kwargs)
            else:
                ctx = Context(att.core, att.executor)
                with workflow_body(ctx):
                    result = w.fn(ctx, *att.args, **att.kwargs)
        except BaseException as exc:
            await asyncio.to_thread(attempts.conclude_error, att, exc)
            raise
        return await asyncio.to_thread(attempts.conclude, att, result)
