"""Where the code running now is: inside a step (:func:`current_step`), or in a
workflow's body (:func:`current_context`).

These are the seams integrations build on (model-client wrappers, framework adapters):
a wrapper asks :func:`current_context` whether it runs in a workflow body, and records
its call as a step there; inside a running step it gets None and passes straight
through, since the step around it is what is recorded. Code that cannot take an
``idempotency_key`` parameter asks :func:`current_step` for the step's key.

Both are context variables set by the drivers (``durably.context``) around each call
of a step function and by the engine around a workflow's body, so they follow the code
into the step threads of async workflows and into ``ctx.gather`` branches (asyncio
copies a task's context when it creates it).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import AsyncContext, Context


@dataclass(frozen=True, slots=True)
class StepInfo:
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

    run_id: str
    position: str
    idempotency_key: str
    attempt: int
    fencing_token: int


_STEP: contextvars.ContextVar[StepInfo | None] = contextvars.ContextVar(
    "durably_current_step", default=None
)
_CONTEXT: contextvars.ContextVar[Context | AsyncContext | None] = contextvars.ContextVar(
    "durably_current_context", default=None
)


def current_step() -> StepInfo | None:
    """The :class:`StepInfo` of the step whose function is running now, else None.

    It is set while a step function runs (sync or async; a sync step of an async
    workflow sees it in its step thread; also while a step's ``reconcile`` function runs,
    and while a streamed step's generator makes each chunk) and is None in a workflow's
    body, outside any run, and once the step has returned.
    """
    return _STEP.get()


def current_context() -> Context | AsyncContext | None:
    """The running workflow's :class:`~durably.Context` (sync workflow) or
    :class:`~durably.AsyncContext` (async workflow), else None.

    It is set in the workflow's body, in its ``ctx.gather`` branches and saga bodies,
    and is None outside a workflow and inside a running step (so a wrapper called from
    a step's function does not record a step of its own: the step is what is recorded).
    """
    return _CONTEXT.get()


@contextlib.contextmanager
def inside_step(info: StepInfo | None) -> Iterator[None]:
    """Around one call of a step function (or one chunk of a streamed step): it sees
    ``info`` as :func:`current_step` and no workflow context."""
    step = _STEP.set(info)
    ctx = _CONTEXT.set(None)
    try:
        yield
    finally:
        _CONTEXT.reset(ctx)
        _STEP.reset(step)


@contextlib.contextmanager
def workflow_body(ctx: Context | AsyncContext) -> Iterator[None]:
    """Around a workflow's body: it sees ``ctx`` as :func:`current_context` and no step
    (a workflow run from inside another's step is a body of its own)."""
    token = _CONTEXT.set(ctx)
    step = _STEP.set(None)
    try:
        yield
    finally:
        _STEP.reset(step)
        _CONTEXT.reset(token)
