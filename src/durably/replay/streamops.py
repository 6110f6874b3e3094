"""The pieces of a streamed step (``ctx.step_stream``) shared by the core and the drivers:
the operations the core yields to the stream's iterator, and the helpers the driver
calls to pull and close the function's chunks.

The core stays sans-I/O: it yields a :class:`~durably.replay.ops.Call` of :func:`next_chunk`
(or :func:`anext_chunk`) for each chunk, and a :class:`Deliver` to hand a chunk to the
caller; the iterator the workflow holds (``durably.context``) carries these out.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any, Protocol

from .._record import Record, set_field
from ..current import StepInfo
from ..limits import STREAM_CHUNKS_MAX as STREAM_CHUNKS_MAX

END: Any = type("StreamEnd", (), {"__repr__": lambda self: "<end of stream>"})()
"""What :func:`next_chunk` / :func:`anext_chunk` return once the chunks are exhausted."""

STOP: Any = type("StreamStop", (), {"__repr__": lambda self: "<caller stopped>"})()
"""The reply to :class:`Begun` or :class:`Deliver` when the caller stopped iterating."""


class Begun(Record, frozen=True):
    """Op: the streamed step took ``position`` (its record, if any, matched); the
    iterator pauses here until the caller asks for the first chunk."""

    __slots__ = ("position",)

    position: str

    def __init__(self, position: str) -> None:
        set_field(self, "position", position)


class Deliver(Record, frozen=True):
    """Op: hand ``chunk`` (number ``index`` of this series) to the caller. ``info`` is
    the live attempt's :class:`~durably.StepInfo`, None for a chunk rebuilt from the
    record (a replay)."""

    __slots__ = ("chunk", "index", "info")

    chunk: Any
    index: int
    info: StepInfo | None

    def __init__(self, chunk: Any, index: int, info: StepInfo | None) -> None:
        set_field(self, "chunk", chunk)
        set_field(self, "index", index)
        set_field(self, "info", info)


class Owner(Protocol):
    """The iterator that drives a streamed step: the core asks it to end the stream when
    a recording call of the same scope comes while the stream is open."""

    def finish(self, by: str) -> None:
        """End the stream now, recording what the caller consumed (``by``: the position
        whose recording call ended it)."""


def next_chunk(it: Iterator[Any]) -> Any:
    """The next chunk of a sync iterator, or :data:`END`."""
    return next(it, END)


async def anext_chunk(it: AsyncIterator[Any]) -> Any:
    """The next chunk of an async iterator, or :data:`END`."""
    try:
        return await it.__anext__()
    except StopAsyncIteration:
        return END


def close_chunks(it: Any) -> None:
    """Close a sync iterator that has a ``close`` (a generator: its ``finally`` runs, a
    provider's stream releases its connection)."""
    close = getattr(it, "close", None)
    if callable(close):
        close()


async def aclose_chunks(it: Any) -> None:
    """Close an async iterator that has an ``aclose`` (or a ``close`` coroutine)."""
    close = getattr(it, "aclose", None) or getattr(it, "close", None)
    if callable(close):
        out = close()
        if hasattr(out, "__await__"):
            await out
