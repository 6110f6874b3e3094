"""``durably.Handle``: a started run, its status, and a way to wait for its result."""

from __future__ import annotations

import time
from typing import Any, Protocol

from ..errors import RunBlocked
from ..history import BLOCKED, RunRecord
from .attempt import final_outcome
from .registry import Workflow


class RunReader(Protocol):
    """What a handle reads: the run's record (``durably.Engine`` is one)."""

    def get_run(self, run_id: str) -> RunRecord:
        """The run's record; raises ``RunNotFound``."""
        ...


class Handle:
    """A started run: its id, its status, and a way to wait for its result."""

    def __init__(self, engine: RunReader, run_id: str, workflow: Workflow) -> None:
        self.engine = engine
        self.run_id = run_id
        self.workflow = workflow

    def __repr__(self) -> str:
        return f"<durably.Handle {self.run_id!r} of {self.workflow.name!r}>"

    def status(self) -> str:
        """The run's current status."""
        return self.engine.get_run(self.run_id).status

    def result(self, timeout_s: float | None = None, poll_s: float = 0.05) -> Any:
        """Wait for the run to finish and return its result (or raise its failure).

        Raises ``TimeoutError`` after ``timeout_s``, and at once for a run that needs a
        person (``RunInDoubt``, ``RunQuarantined``, ``RunBlocked``).
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            run = self.engine.get_run(self.run_id)
            final = final_outcome(self.workflow, run)
            if final is not None:
                return final.value
            if run.status == BLOCKED:
                raise RunBlocked(f"run {self.run_id!r} is blocked: {run.park_reason}")
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(
                    f"run {self.run_id!r} did not finish within {timeout_s} s (status"
                    f" {run.status}); is a worker running (durably worker module:engine)?"
                )
            time.sleep(poll_s)
