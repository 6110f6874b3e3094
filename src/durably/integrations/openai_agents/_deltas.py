"""The live deltas of a streamed model turn, as ``model.delta`` events of the run: the
``on_chunk`` hook of its ``ctx.step_stream``, called for live chunks only (a replay
sends none), with the step's position, attempt and fencing token, so a retry or a
re-run after a crash is a fresh series (index 0 again)."""

from __future__ import annotations

from typing import Any

from ... import AsyncContext, StepInfo
from . import _wire

KIND = "model.delta"


class DeltaHook:
    """``on_chunk(event, index, info)``: one ``model.delta`` event per stream event
    that carries text or a tool call's argument fragment."""

    __slots__ = ("ctx",)

    def __init__(self, ctx: AsyncContext) -> None:
        self.ctx = ctx

    def __call__(self, event: Any, index: int, info: StepInfo) -> None:
        text = _wire.delta_of(event)
        if text is None:
            return
        data: dict[str, Any] = {
            "position": info.position,
            "index": index,
            "attempt": info.attempt,
            "fencing_token": info.fencing_token,
        }
        data["text" if event.type == "response.output_text.delta" else "fragment"] = text
        self.ctx.emit(KIND, data)
