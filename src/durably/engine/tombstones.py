"""The errors a tombstone stands behind: ``RunPruned`` for the run it stands for, and
``RunConflict`` for a creation under its id with other workflow or input."""

from __future__ import annotations

import datetime as _dt

from ..errors import DurablyError, RunConflict, RunPruned
from ..journal.records import REDACTED_DIGEST
from ..store.base import NewRun
from ..store.retained import Tombstone


def when(t: float | None) -> str:
    """A time of the journal as people read it (UTC)."""
    if t is None:
        return "at an unknown time"
    return _dt.datetime.fromtimestamp(t, _dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def pruned_error(tomb: Tombstone) -> RunPruned:
    """``RunPruned`` for the run the tombstone stands for."""
    verb = "deleted" if tomb.how == "deleted" else "pruned"
    return RunPruned(
        f"run {tomb.run_id!r} ({tomb.workflow}) finished {tomb.status} {when(tomb.finished_at)}"
        f" and was {verb} {when(tomb.removed_at)}: only its tombstone is left, so it can"
        " be neither read nor run again (a fresh run under this id would repeat its"
        " effects under new keys); use a new run_id (`durably runs list --pruned` lists"
        " tombstones)"
    )


def check_recreate(tomb: Tombstone, new: NewRun) -> DurablyError:
    """The error for creating ``new`` over a tombstone: ``RunPruned`` for the same
    workflow and input, ``RunConflict`` (as for a live run) for another."""
    if tomb.workflow != new.workflow:
        return RunConflict(
            f"run_id {new.run_id!r} belonged to workflow {tomb.workflow!r}, not"
            f" {new.workflow!r}, and was {tomb.how}; choose another run_id"
        )
    if tomb.input_digest != new.input_digest and tomb.input_digest != REDACTED_DIGEST:
        # (A redacted run's input is unknown: no input can be told apart from it, so any
        # is refused as the pruned run, the safe side.)
        return RunConflict(
            f"run_id {new.run_id!r} was started with other input (and was {tomb.how});"
            " use a new run_id for new input"
        )
    return pruned_error(tomb)
