"""Where the code running now is: inside a step (:func:`current_step`), or in a
workflow's body (:func:`durably.current_context`).

These are the seams integrations build on (model-client wrappers, framework adapters):
a wrapper asks :func:`durably.current_context` whether it runs in a workflow body, and records
its call as a step there; inside a running step it gets None and passes straight
through, since the step around it is what is recorded. Code that cannot take an
``idempotency_key`` parameter asks :func:`current_step` for the step's key.

Both are context variables set by the drivers (``durably.runtime``) around each call
of a step function and by the engine around a workflow's body, so they follow the code
into the step threads of async workflows and into ``ctx.gather`` branches (asyncio
copies a task's context when it creates it). The workflow's context itself is kept by
:mod:`durably.context` (where its types live, so this module imports nothing above it):
here is only whether a step function is running.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

from ._record import Record, set_field


class StepInfo(Record, frozen=True):
    """The step whose function is running now (see :func:`current_step`).

    ``run_id``: the run. ``position``: the step's position (``"3"``, or ``"4.1.0"`` in
    branch 1 of the gather at position 4). ``idempotency_key``: the key the step's
    function would receive as ``idempotency_key`` (the same on every retry and after
    every crash). ``attempt``: 1 for the first call, 2 for its first retry, ...; the same
    number the step's ``step.started``/``step.retried`` events and its record carry (for
    an ``effect=True`` step this counts the executions its intent recorded before a
    crash; for other steps a crash is not counted, nothing being written to count it).
    ``fencing_token``: the run's fencing token in this claim; it grows on every claim,
    so a re-execution after a crash has a higher one than the execution it replaces.
    """

    __slots__ = ("attempt", "fencing_token", "idempotency_key", "position", "run_id")

    run_id: str
    position: str
    idempotency_key: str
    attempt: int
    fencing_token: int

    def __init__(
        self, run_id: str, position: str, idempotency_key: str, attempt: int, fencing_token: int
    ) -> None:
        set_field(self, "run_id", run_id)
        set_field(self, "position", position)
        set_field(self, "idempotency_key", idempotency_key)
        set_field(self, "attempt", attempt)
        set_field(self, "fencing_token", fencing_token)


_STEP: contextvars.ContextVar[StepInfo | None] = contextvars.ContextVar(
    "durably_current_step", default=None
)
# True while a step function runs: the workflow's context (durably.context) is hidden.
_IN_STEP: contextvars.ContextVar[bool] = contextvars.ContextVar("durably_in_step", default=False)


def current_step() -> StepInfo | None:
    """The :class:`StepInfo` of the step whose function is running now, else None.

    It is set while a step function runs (sync or async; a sync step of an async
    workflow sees it in its step thread; also while a step's ``reconcile`` function runs,
    and while a streamed step's generator makes each chunk) and is None in a workflow's
    body, outside any run, and once the step has returned.
    """
    return _STEP.get()


def in_step() -> bool:
    """True while a step function (or a streamed step's chunk) runs."""
    return _IN_STEP.get()


class inside_step:
    """Around one call of a step function (or one chunk of a streamed step): it sees
    ``info`` as :func:`current_step` and no workflow context. A class, not a generator:
    it is around every step's call (and every chunk of a streamed step)."""

    __slots__ = ("_hidden", "_info", "_step")

    def __init__(self, info: StepInfo | None) -> None:
        self._info = info

    def __enter__(self) -> None:
        self._step = _STEP.set(self._info)
        self._hidden = _IN_STEP.set(True)

    def __exit__(self, *exc: object) -> None:
        _IN_STEP.reset(self._hidden)
        _STEP.reset(self._step)


@contextlib.contextmanager
def outside_step() -> Iterator[None]:
    """Around a workflow's body (``durably.context.workflow_body``): no step is running
    there (a workflow run from inside another's step is a body of its own)."""
    step = _STEP.set(None)
    shown = _IN_STEP.set(False)
    try:
        yield
    finally:
        _IN_STEP.reset(shown)
        _STEP.reset(step)
