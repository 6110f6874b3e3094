"""Anthropic's streamed calls (``messages.create(stream=True)`` and the
``messages.stream(...)`` helper): their deltas for followers, the assembled record and
the synthetic raw events a replay hands out, with the ``anthropic`` package's own types
(see :mod:`._streams`). ``messages.stream`` gives the caller the SDK's own
``MessageStream`` over the recorded step's raw events, so ``text_stream``,
``get_final_message()`` and the helper events behave as without durably."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Mapping
from types import TracebackType
from typing import Any

from anthropic.lib.streaming import (
    AsyncMessageStream,
    MessageStream,
)
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import (
    RawContentBlockDeltaEvent,
    RawContentBlockStartEvent,
    RawContentBlockStopEvent,
    RawMessageDeltaEvent,
    RawMessageStartEvent,
    RawMessageStopEvent,
)

from .. import AsyncStepStream, StepStream
from ._common import build, dump
from ._streams import StreamSpec


def deltas(event: Any) -> list[dict[str, Any]]:
    """A raw event's text or tool-input fragment (``tool``: the content block's index)."""
    kind = getattr(event, "type", None)
    if kind == "content_block_delta":
        d = event.delta
        if d.type == "text_delta" and d.text:
            return [{"text": d.text}]
        if d.type == "input_json_delta" and d.partial_json:
            return [{"tool": event.index, "arguments": d.partial_json}]
    if kind == "content_block_start" and event.content_block.type == "tool_use":
        return [{"tool": event.index, "name": event.content_block.name, "arguments": ""}]
    return []


def assemble(events: list[Any]) -> Any:
    """The raw events as one ``message`` (the SDK's own accumulator)."""
    snapshot: Any = None
    bufs: dict[int, bytes] = {}
    for e in events:
        if snapshot is None and getattr(e, "type", "") != "message_start":
            continue
        snapshot = accumulate_event(event=e, current_snapshot=snapshot, json_bufs=bufs)
    if snapshot is None:
        return None
    data = dump(snapshot)
    for block in data.get("content") or ():
        block.pop("parsed_output", None)
    return data


def ending(event: Any) -> bool:
    return getattr(event, "type", "") == "message_stop"


def final(event: Any) -> bool:
    # message_delta carries the cumulative usage of the whole message.
    return getattr(event, "type", "") == "message_delta"


def replay(data: Any, _: Mapping[str, Any]) -> list[Any]:
    """The recorded message as the raw events the API sends for it: message_start, per
    content block its start, its text (or tool input, or thinking) in one delta and its
    stop, then message_delta (stop reason, usage) and message_stop."""
    if not isinstance(data, dict):
        return []
    usage = data.get("usage") or {}
    start = {
        **copy.deepcopy(data),
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {**usage, "output_tokens": 1 if usage.get("output_tokens") else 0},
    }
    out: list[Any] = [build(RawMessageStartEvent, {"type": "message_start", "message": start})]
    for i, block in enumerate(data.get("content") or ()):
        kind = block.get("type")
        opening = copy.deepcopy(block)
        pieces: list[dict[str, Any]] = []
        if kind == "text":
            opening["text"] = ""
            pieces.append({"type": "text_delta", "text": block.get("text", "")})
        elif kind in ("tool_use", "server_tool_use"):
            opening["input"] = {}
            text = json.dumps(block.get("input", {}), separators=(",", ":"))
            pieces.append({"type": "input_json_delta", "partial_json": text})
        elif kind == "thinking":
            opening["thinking"] = ""
            opening["signature"] = ""
            pieces.append({"type": "thinking_delta", "thinking": block.get("thinking", "")})
            pieces.append({"type": "signature_delta", "signature": block.get("signature", "")})
        begin = {"type": "content_block_start", "index": i, "content_block": opening}
        out.append(build(RawContentBlockStartEvent, begin))
        for delta in pieces:
            event = {"type": "content_block_delta", "index": i, "delta": delta}
            out.append(build(RawContentBlockDeltaEvent, event))
        out.append(build(RawContentBlockStopEvent, {"type": "content_block_stop", "index": i}))
    tail = {
        "type": "message_delta",
        "delta": {
            "stop_reason": data.get("stop_reason"),
            "stop_sequence": data.get("stop_sequence"),
        },
        "usage": usage,
    }
    out.append(build(RawMessageDeltaEvent, tail))
    out.append(build(RawMessageStopEvent, {"type": "message_stop"}))
    return out


class _Raw:
    """The step's raw events as the SDK's stream helper reads its raw stream."""

    __slots__ = ("_steps",)

    def __init__(self, steps: StepStream) -> None:
        self._steps = steps

    def __iter__(self) -> Iterator[Any]:
        return self._steps

    def close(self) -> None:
        self._steps.close()


class _AsyncRaw:
    __slots__ = ("_steps",)

    def __init__(self, steps: AsyncStepStream) -> None:
        self._steps = steps

    def __aiter__(self) -> AsyncStepStream:
        return self._steps

    async def close(self) -> None:
        await self._steps.aclose()


class DurableMessageStreamManager:
    """What ``messages.stream(...)`` returns in a sync workflow: ``with`` it for the
    SDK's own ``MessageStream`` (``text_stream``, ``get_final_message()``, ...)."""

    __slots__ = ("_steps",)

    def __init__(self, steps: StepStream) -> None:
        self._steps = steps

    def __enter__(self) -> MessageStream[Any]:
        from anthropic import NOT_GIVEN

        return MessageStream(_Raw(self._steps), output_format=NOT_GIVEN)  # type: ignore[arg-type]

    def __exit__(
        self,
        typ: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._steps.__exit__(typ, exc, tb)


class AsyncDurableMessageStreamManager:
    """What ``messages.stream(...)`` returns in an async workflow: ``async with`` it for
    the SDK's own ``AsyncMessageStream``."""

    __slots__ = ("_steps",)

    def __init__(self, steps: AsyncStepStream) -> None:
        self._steps = steps

    async def __aenter__(self) -> AsyncMessageStream[Any]:
        from anthropic import NOT_GIVEN

        return AsyncMessageStream(_AsyncRaw(self._steps), output_format=NOT_GIVEN)  # type: ignore[arg-type]

    async def __aexit__(
        self,
        typ: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._steps.__aexit__(typ, exc, tb)


def _present(steps: StepStream | AsyncStepStream, _: Mapping[str, Any]) -> Any:
    if isinstance(steps, AsyncStepStream):
        return AsyncDurableMessageStreamManager(steps)
    return DurableMessageStreamManager(steps)


CREATE = StreamSpec(
    target=("messages", "create"),
    deltas=deltas,
    assemble=assemble,
    replay=replay,
    final=final,
    ending=ending,
)

STREAM = StreamSpec(
    target=("messages", "create"),
    deltas=deltas,
    assemble=assemble,
    replay=replay,
    final=final,
    ending=ending,
    present=_present,
    # output_format makes the SDK parse the text into a type (not recorded yet).
    refused=frozenset({"output_format"}),
)
