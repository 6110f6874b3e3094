"""Which position a tool call of a model turn records at.

Pydantic AI runs a turn's tool calls concurrently, as asyncio tasks of its own, and an
approval it asks for later, after the other calls ran. Their positions must not depend
on which task gets to the context first: each turn's calls get one group of ordered
branches (``ctx.branches(labels)``), one branch per call in the order the model listed
them, so call ``i`` of the turn whose model request was at ``p`` records at ``p+1.i.0``
(its approval first, then its step) whatever else runs at once. The group is taken by
the first call of the turn that reaches durably (taking it is a plain call, no await,
so two tasks never both take one), and ends when the next model request takes its
position.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from pydantic_ai.messages import ModelResponse

from ... import AsyncContext, Branches


class Turns:
    """The model turns of one agent run inside a workflow, and their branch groups."""

    def __init__(self, ctx: AsyncContext) -> None:
        self.ctx = ctx
        self._response: ModelResponse | None = None
        self._ids: list[str] = []
        self._group: Branches | None = None

    def model_answered(self, response: ModelResponse) -> None:
        """A model request returned ``response`` (live or from the record): its tool
        calls are the next turn's."""
        self._response = response
        self._ids = [c.tool_call_id for c in response.tool_calls]
        self._group = None

    @contextlib.contextmanager
    def call(self, tool_call_id: str | None) -> Iterator[None]:
        """Around the recording calls of one tool call (its approval, its step): they
        number in the call's own branch."""
        if tool_call_id is None or tool_call_id not in self._ids:
            # A call the last response did not list (a tool called from outside the
            # graph): it records on the run's own scope, in program order.
            yield
            return
        if self._group is None:
            labels = [c.tool_name for c in self._response.tool_calls] if self._response else []
            self._group = self.ctx.branches(labels)
        with self._group.branch(self._ids.index(tool_call_id)):
            yield
