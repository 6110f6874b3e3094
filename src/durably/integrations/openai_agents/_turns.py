"""One ``DurableRunner`` run's memory of its last model turn: the function calls the
model listed, in order, so the SDK's concurrent tool calls take positions that follow
that order (``ctx.branches``), never the order they happen to start or finish in."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ... import AsyncContext


class Turns:
    """The calls of the latest recorded model response, and the branch group their
    steps run in (made when the first of them starts: it takes the next position)."""

    __slots__ = ("_group", "_index", "_labels", "ctx")

    def __init__(self, ctx: AsyncContext) -> None:
        self.ctx = ctx
        self._index: dict[str, int] = {}
        self._labels: list[str] = []
        self._group: Any = None

    def saw(self, output: list[Any]) -> None:
        """A model response was returned (live or replayed): its function calls, in the
        order the model listed them, are the next tool group."""
        calls = [item for item in output if getattr(item, "type", None) == "function_call"]
        self._index = {str(c.call_id): n for n, c in enumerate(calls)}
        self._labels = [str(c.name) for c in calls]
        self._group = None

    @contextlib.contextmanager
    def branch(self, call_id: str | None) -> Iterator[None]:
        """Around one tool call's recording calls: its branch of this turn's group (the
        group is made on first use, at the next position of the run's scope). A call
        the last response did not list (none is expected) records on the run's scope."""
        index = self._index.get(call_id) if call_id is not None else None
        if index is None:
            yield
            return
        if self._group is None:
            self._group = self.ctx.branches(self._labels)
        with self._group.branch(index):
            yield
