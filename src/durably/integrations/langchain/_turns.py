"""Which position a tool call of a model turn records at.

LangChain runs a turn's tool calls concurrently: in a sync agent on threads of
LangGraph's executor (which copy the context variables), in an async one as asyncio
tasks. Their positions must not depend on which gets to durably first: each turn's
calls get one group of ordered branches (``ctx.branches(labels)``), one branch per call
in the order the model listed them in its ``AIMessage``, so call ``i`` of the turn whose
model call was at ``p`` records at ``p+1.i.k`` whatever else runs at once. The group is
taken, under a lock, by the first call of the turn that reaches durably; the next model
call forgets it (and takes the next position, which ends the group).
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage

from ... import AsyncContext, Branches, Context

# How many workflows' turn states one middleware keeps, oldest dropped first. A state
# holds no context: a run's last model call (its answer, no tool calls) drops the turn's
# group, so a finished run leaves two small fields behind.
RUNS_KEPT = 256


def listed_calls(state: Any, call_id: str | None) -> list[Mapping[str, Any]] | None:
    """The tool calls of the last ``AIMessage`` in the agent's ``state`` that lists
    ``call_id``, in the model's order, else None."""
    messages: Sequence[Any] = []
    if isinstance(state, Mapping):
        messages = state.get("messages") or []
    else:
        messages = getattr(state, "messages", None) or []
    for message in reversed(messages):
        if isinstance(message, AIMessage) and message.tool_calls:
            if any(c.get("id") == call_id for c in message.tool_calls):
                return list(message.tool_calls)
            return None
    return None


class _Turn:
    __slots__ = ("group", "ids")

    def __init__(self) -> None:
        self.ids: tuple[str | None, ...] = ()
        self.group: Branches | None = None


class Turns:
    """The current turn's branch group of each workflow that runs the agent."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: OrderedDict[tuple[str, int], _Turn] = OrderedDict()

    def _turn(self, ctx: Context | AsyncContext) -> _Turn:
        # A context's id may be reused once it is gone; a run's next context always makes
        # a model call (replayed or live) before its tool calls, which resets the turn.
        key = (ctx.run_id, id(ctx))
        turn = self._runs.get(key)
        if turn is None:
            turn = self._runs[key] = _Turn()
            while len(self._runs) > RUNS_KEPT:
                self._runs.popitem(last=False)
        self._runs.move_to_end(key)
        return turn

    def model_called(self, ctx: Context | AsyncContext) -> None:
        """A model call of ``ctx``'s agent took its position: the next tool calls are a
        new turn's."""
        with self._lock:
            turn = self._turn(ctx)
            turn.ids, turn.group = (), None

    @contextlib.contextmanager
    def call(self, ctx: Context | AsyncContext, request: Any) -> Iterator[None]:
        """Around the recording calls of one tool call (its step, an approval): they
        number in the call's own branch."""
        call_id = request.tool_call.get("id")
        calls = listed_calls(request.state, call_id)
        if calls is None:
            # A call no model turn listed (a tool run from outside the model's answer):
            # it records on the run's own scope, in program order.
            yield
            return
        ids = tuple(c.get("id") for c in calls)
        with self._lock:
            turn = self._turn(ctx)
            if turn.group is None or turn.ids != ids:
                turn.ids = ids
                turn.group = ctx.branches([str(c.get("name")) for c in calls])
            group = turn.group
        with group.branch(ids.index(call_id)):
            yield
