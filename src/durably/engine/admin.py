"""Operator actions: a person's retry, skip, cancel and fork of a run, and the recovery
of the runs this host's dead processes left running."""

from __future__ import annotations

from typing import Any

from .. import codec, reopen
from ..errors import ConfigError, RunFinished, RunNotFound, WorkflowNotRegistered
from ..history import (
    BLOCKED,
    CANCEL_REASON_CHARS_MAX,
    FAILED_RUN,
    IN_DOUBT,
    QUARANTINED,
    STEP_OUTPUT_BYTES_MAX,
    RunRecord,
    storable_text,
)
from ..recovery import recover_runs
from ..replay.kernel import cancelled_error
from ..store.base import NewRun
from ..store.retained import Redacted, Tombstoned
from ..store.runs import check_requeueable
from .attempt import ActiveRuns
from .base import Base
from .create import Creator
from .drive import Driver
from .registry import Registry, Workflow, unregistered
from .retention import redacted_error, refuse_redacted
from .tombstones import check_recreate


class Admin:
    """retry, skip, cancel, fork and recover (see the facade's docstrings)."""

    def __init__(
        self,
        base: Base,
        registry: Registry,
        creator: Creator,
        driver: Driver,
        active: ActiveRuns,
    ) -> None:
        self._base = base
        self._registry = registry
        self._creator = creator
        self._driver = driver
        self._active = active

    def retry(self, run_id: str) -> RunRecord:
        """Re-open a failed, in-doubt, quarantined or blocked run; returns it queued."""
        try:
            return self._retry(run_id)
        except Redacted as exc:  # redacted since it was read: it stays as it is
            raise redacted_error(exc.red, "be retried") from None

    def _retry(self, run_id: str) -> RunRecord:
        store = self._base.store
        run = self._base.get_run(run_id)
        refuse_redacted(self._base, run, "be retried")
        if run.status == FAILED_RUN:
            history = self._base.history(run_id)
            reopen.check_not_compensated(run, history)
            failed = reopen.failed_frontier(history)
            reopen.check_reopenable(run, history, failed)
            return store.requeue(run_id, (FAILED_RUN,), drop_positions=failed)
        if run.status == IN_DOUBT:
            # Only the step the person decided on: other intents still meet their own
            # key, reconcile or doubt check when the run reaches them.
            doubt = reopen.doubt_position(run.park_reason)
            return store.requeue(
                run_id,
                (IN_DOUBT,),
                drop_intents=doubt is None,
                drop_positions=() if doubt is None else (doubt,),
            )
        # Only the statuses this branch decided for: a run that failed or went in doubt
        # since it was read above needs that branch's drops, so it is refused here.
        check_requeueable(run, (FAILED_RUN, IN_DOUBT, QUARANTINED, BLOCKED))
        return store.requeue(run_id, (QUARANTINED, BLOCKED))

    def cancel(self, run_id: str, reason: str | None) -> RunRecord:
        """Ask for the run to be cancelled; a run driven here is told at once."""
        self._base.known_run_id(run_id)
        if reason is not None and not isinstance(reason, str):
            raise ConfigError(f"reason must be a str or None, got {reason!r:.100}")
        text = None if reason is None else storable_text(reason, CANCEL_REASON_CHARS_MAX)
        run = self._base.call(lambda: self._base.store.request_cancel(run_id, text))
        att = self._active.get(run_id)
        if att is not None and run.cancel_requested_at is not None:
            # Driven by this process: no need to wait for its next append to see it.
            att.core.request_halt(cancelled_error(run_id, run.cancel_reason))
        return run

    def fork(self, run_id: str, at: int, new_run_id: str | None) -> tuple[RunRecord, Workflow]:
        """The new run replaying ``run_id`` below ``at``, and the registration that will
        drive it (a stand-in when this engine does not register it)."""
        run = self._base.get_run(run_id)
        refuse_redacted(self._base, run, "be forked")
        history = self._base.history(run_id)
        records = reopen.fork_records(history, reopen.fork_at(at, history))
        new_id = self._creator.new_run_id(new_run_id)
        new = NewRun(
            new_id,
            run.workflow,
            run.version,
            run.prompt_version,
            run.queue,
            run.input,
            run.input_digest,
            run.codec_version,
        )
        try:
            forked = self._base.store.fork_run(new, records, source=run_id)
        except Tombstoned as exc:
            raise check_recreate(exc.tomb, new) from None
        except Redacted as exc:  # redacted since it was read: the copy never lands
            raise redacted_error(exc.red, "be forked") from None
        except RunNotFound:  # pruned or deleted since it was read
            self._base.raise_if_pruned(run_id)
            raise
        try:
            w = self._registry.for_run(forked)  # the registration that will drive it, if here
        except WorkflowNotRegistered:
            w = unregistered(forked)
        return forked, w

    def skip(self, run_id: str, output: Any, position: str | None) -> RunRecord:
        """Record ``output`` for the step in doubt; returns the run queued."""
        run = self._base.get_run(run_id)
        if run.status != IN_DOUBT:
            raise RunFinished(
                f"run {run_id!r} is {run.status}, not in_doubt: there is no step to skip"
            )
        doubts = [r.position for r in self._base.history(run_id) if r.status == "intent"]
        named = reopen.doubt_position(run.park_reason)
        if position is None and named in doubts:
            position = named
        if position is None:
            if len(doubts) != 1:
                raise ConfigError(
                    f"run {run_id!r} has {len(doubts)} steps in doubt ({', '.join(doubts)});"
                    " name one with position="
                )
            position = doubts[0]
        text = codec.dumps(output, f"the output given for step {position}", STEP_OUTPUT_BYTES_MAX)
        return self._base.store.requeue(run_id, (IN_DOUBT,), resolve=(position, text))

    def recover(self) -> dict[str, Any]:
        """Resume the runs this host's gone processes left running or parked, and due
        parked runs (:mod:`durably.recovery`); see the facade."""
        return recover_runs(
            self._base.store,
            self._registry.served(),
            self._base.opts.clock,
            lambda run_id: self._driver.resume(run_id, wait=False, live=False),
        )
