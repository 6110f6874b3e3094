"""``wait_for_approval(...)`` inside a tool: a durably approval that parks the run.

A tool runs inside its recorded step, where no recording call can be made. So the
first time a tool reaches ``wait_for_approval`` it stops there (a ``BaseException``, so
no tool error handler turns it into an answer) and its step records that it asks; the
middleware then makes the request with ``ctx.request_approval`` in the call's branch
(the run parks until ``durably approve``/``reject``, holding nothing) and, once
approved, runs the tool again as the next step of the branch, where the call returns
the ``durably.Decision``. A tool's code before its ``wait_for_approval`` runs once per
ask: put the call first, before any effect. A rejected or expired request is the tool's
answer to the model (an error ``ToolMessage``); the tool is not run again.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

from ... import ConfigError, Context, Decision, current_context


class Granted:
    """The decisions already made for the tool call running in this step (one per
    ``wait_for_approval`` it reached, in order) and how many it has been handed."""

    __slots__ = ("asked", "decisions")

    def __init__(self, decisions: list[Decision]) -> None:
        self.decisions = decisions
        self.asked = 0


# The current tool call's Granted, or None outside a tool the middleware runs.
GRANTED: ContextVar[Granted | None] = ContextVar("durably_langchain_granted", default=None)


class ApprovalAsked(BaseException):
    """A tool reached ``wait_for_approval`` without a decision for it yet: its step
    records the request, the middleware makes it (see the module docstring)."""

    def __init__(self, action: str, args: Any, timeout_s: float | None) -> None:
        super().__init__(action)
        self.action = action
        self.data = args
        self.timeout_s = timeout_s


def wait_for_approval(action: str, args: Any = None, *, timeout_s: float | None = None) -> Decision:
    """Inside a LangChain tool run by :class:`DurablyMiddleware`: park the run until a
    person approves or rejects ``action`` with ``args`` (plain JSON data), the way
    ``ctx.request_approval`` does, and return the approved ``durably.Decision``; a
    rejected or expired request ends the tool call there (its answer to the model says
    so). Call it before the tool's effects: the code before it runs once more after
    the approval. Use it instead of LangGraph's ``interrupt()``, which middleware
    cannot resume. In a sync workflow's own body it is ``ctx.request_approval``.
    """
    granted = GRANTED.get()
    if granted is not None:
        if granted.asked < len(granted.decisions):
            granted.asked += 1
            return granted.decisions[granted.asked - 1]
        raise ApprovalAsked(action, args, timeout_s)
    ctx = current_context()
    if isinstance(ctx, Context):
        return ctx.request_approval(action, args, timeout_s=timeout_s)
    raise ConfigError(
        "durably.integrations.langchain.wait_for_approval is called from a tool of an agent"
        " built with middleware=[DurablyMiddleware()] inside a durably workflow (or from a"
        " sync workflow's body): add the middleware, or call ctx.request_approval in the"
        " workflow"
    )
