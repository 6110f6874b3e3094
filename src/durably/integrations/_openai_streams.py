"""OpenAI's streamed calls (``chat.completions.create(stream=True)``,
``responses.create(stream=True)``): their deltas for followers, the assembled record
and the synthetic stream a replay hands out, with the ``openai`` package's own types
(see :mod:`._streams`)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletionChunk
from openai.types.responses import (
    ResponseCompletedEvent,
    ResponseContentPartAddedEvent,
    ResponseContentPartDoneEvent,
    ResponseCreatedEvent,
    ResponseFailedEvent,
    ResponseFunctionCallArgumentsDeltaEvent,
    ResponseFunctionCallArgumentsDoneEvent,
    ResponseIncompleteEvent,
    ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent,
    ResponseTextDeltaEvent,
    ResponseTextDoneEvent,
)

from ._common import build, dump
from ._streams import StreamSpec

# -- chat.completions.create(stream=True) ---------------------------------------------------


def chat_deltas(chunk: Any) -> list[dict[str, Any]]:
    """A chunk's text and tool-call argument fragments (``choice`` when not the first)."""
    out: list[dict[str, Any]] = []
    for choice in getattr(chunk, "choices", None) or ():
        delta = choice.delta
        extra = {"choice": choice.index} if choice.index else {}
        if delta.content:
            out.append({"text": delta.content, **extra})
        for tc in delta.tool_calls or ():
            fn = tc.function
            piece: dict[str, Any] = {"tool": tc.index, **extra}
            if fn is not None and fn.name:
                piece["name"] = fn.name
            piece["arguments"] = (fn.arguments if fn is not None else None) or ""
            if piece["arguments"] or "name" in piece:
                out.append(piece)
    return out


def chat_assemble(chunks: list[Any]) -> Any:
    """The chunks as one ``chat.completion`` (the SDK's own accumulator), usage included
    when the stream sent it (``stream_options={"include_usage": True}``)."""
    state: ChatCompletionStreamState[Any] = ChatCompletionStreamState()
    for chunk in chunks:
        state.handle_chunk(chunk)
    if not chunks:
        return None
    data = dump(state.current_completion_snapshot)
    data["object"] = "chat.completion"
    for choice in data.get("choices") or ():
        choice.get("message", {}).pop("parsed", None)
    return data


def chat_final(chunk: Any) -> bool:
    return getattr(chunk, "usage", None) is not None


def chat_replay(data: Any, _: Mapping[str, Any]) -> list[Any]:
    """The recorded completion as chunks: per choice its role, its text, each tool call
    whole, its finish; then the usage chunk when the stream had one."""
    if not isinstance(data, dict):
        return []
    base = {
        "id": data.get("id", ""),
        "object": "chat.completion.chunk",
        "created": data.get("created", 0),
        "model": data.get("model", ""),
        "system_fingerprint": data.get("system_fingerprint"),
        "service_tier": data.get("service_tier"),
    }

    def chunk(choices: list[dict[str, Any]], usage: Any = None) -> Any:
        return build(ChatCompletionChunk, {**base, "choices": choices, "usage": usage})

    out: list[Any] = []
    for choice in data.get("choices") or ():
        i = choice.get("index", 0)
        msg = choice.get("message") or {}

        def one(delta: dict[str, Any], finish: Any = None, i: int = i) -> dict[str, Any]:
            return {"index": i, "delta": delta, "finish_reason": finish, "logprobs": None}

        out.append(chunk([one({"role": msg.get("role", "assistant"), "content": ""})]))
        if msg.get("content"):
            out.append(chunk([one({"content": msg["content"]})]))
        if msg.get("refusal"):
            out.append(chunk([one({"refusal": msg["refusal"]})]))
        for n, tc in enumerate(msg.get("tool_calls") or ()):
            fn = tc.get("function") or {}
            call = {
                "index": n,
                "id": tc.get("id"),
                "type": tc.get("type", "function"),
                "function": {"name": fn.get("name"), "arguments": fn.get("arguments", "")},
            }
            out.append(chunk([one({"tool_calls": [call]})]))
        out.append(chunk([one({}, choice.get("finish_reason"))]))
    if data.get("usage") is not None:
        out.append(chunk([], data["usage"]))
    return out


def chat_ending(chunk: Any) -> bool:
    return any(c.finish_reason for c in getattr(chunk, "choices", None) or ())


CHAT = StreamSpec(
    target=("chat", "completions", "create"),
    deltas=chat_deltas,
    assemble=chat_assemble,
    replay=chat_replay,
    final=chat_final,
    ending=chat_ending,
)

# -- responses.create(stream=True) ----------------------------------------------------------

_TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})


def responses_deltas(event: Any) -> list[dict[str, Any]]:
    """An event's text or function-call argument fragment (``tool``: its output index)."""
    kind = getattr(event, "type", None)
    if kind == "response.output_text.delta" and event.delta:
        return [{"text": event.delta}]
    if kind == "response.function_call_arguments.delta" and event.delta:
        return [{"tool": event.output_index, "arguments": event.delta}]
    if kind == "response.output_item.added" and getattr(event.item, "type", "") == "function_call":
        return [{"tool": event.output_index, "name": event.item.name, "arguments": ""}]
    return []


def responses_assemble(events: list[Any]) -> Any:
    """The stream's final response (its ``response.completed``, or ``incomplete`` /
    ``failed``); a stream stopped early keeps its latest snapshot with the output items
    the caller saw: those done as they were, an unfinished one with the text and
    arguments that had arrived (a replay then hands out what the caller read live)."""
    latest: Any = None
    items: dict[int, Any] = {}
    for e in events:
        kind = getattr(e, "type", "")
        if kind in _TERMINAL:
            return dump(e.response)
        if kind in ("response.output_item.added", "response.output_item.done"):
            items[e.output_index] = dump(e.item)
        elif kind == "response.content_part.added":
            _part(items, e.output_index, e.content_index, dump(e.part))
        elif kind == "response.output_text.delta":
            part = _part(items, e.output_index, e.content_index, None)
            if part is not None:
                part["text"] = str(part.get("text") or "") + str(e.delta or "")
        elif kind == "response.function_call_arguments.delta":
            item = items.get(e.output_index)
            if isinstance(item, dict):
                item["arguments"] = str(item.get("arguments") or "") + str(e.delta or "")
        resp = getattr(e, "response", None)
        if resp is not None:
            latest = resp
    if latest is None:
        return None
    data = dump(latest)
    data["output"] = [items[i] for i in sorted(items)]
    return data


def _part(items: dict[int, Any], oi: int, ci: int, part: Any) -> dict[str, Any] | None:
    """Content part ``ci`` of unfinished output item ``oi`` (set to ``part`` if given)."""
    item = items.get(oi)
    if not isinstance(item, dict):
        return None
    content = item.setdefault("content", [])
    if not isinstance(content, list):
        return None
    if part is not None:
        while len(content) <= ci:
            content.append({"type": "output_text", "text": "", "annotations": []})
        content[ci] = part
    return content[ci] if ci < len(content) and isinstance(content[ci], dict) else None


def responses_final(event: Any) -> bool:
    return getattr(event, "type", "") in _TERMINAL


def responses_replay(data: Any, _: Mapping[str, Any]) -> list[Any]:
    """The recorded response as the events the API sends for it: created, each output
    item added with its text or arguments in one delta, done, and completed."""
    if not isinstance(data, dict):
        return []
    seq = iter(range(1 << 30))
    out: list[Any] = []
    start = {**copy.deepcopy(data), "status": "in_progress", "output": [], "usage": None}
    out.append(build(ResponseCreatedEvent, _ev("response.created", seq, response=start)))
    for oi, item in enumerate(data.get("output") or ()):
        item_id = item.get("id", "")
        opening = copy.deepcopy(item)
        if item.get("type") == "message":
            opening["content"] = []
        if item.get("type") == "function_call":
            opening["arguments"] = ""
        opening["status"] = "in_progress"
        added = _ev("response.output_item.added", seq, output_index=oi, item=opening)
        out.append(build(ResponseOutputItemAddedEvent, added))
        if item.get("type") == "message":
            for ci, part in enumerate(item.get("content") or ()):
                text = part.get("text", "")
                at = {"item_id": item_id, "output_index": oi, "content_index": ci}
                empty = {**part, "text": ""} if "text" in part else part
                out.append(
                    build(
                        ResponseContentPartAddedEvent,
                        _ev("response.content_part.added", seq, part=empty, **at),
                    )
                )
                if part.get("type") == "output_text":
                    delta = _ev("response.output_text.delta", seq, delta=text, logprobs=[], **at)
                    out.append(build(ResponseTextDeltaEvent, delta))
                    fin = _ev("response.output_text.done", seq, text=text, logprobs=[], **at)
                    out.append(build(ResponseTextDoneEvent, fin))
                out.append(
                    build(
                        ResponseContentPartDoneEvent,
                        _ev("response.content_part.done", seq, part=part, **at),
                    )
                )
        elif item.get("type") == "function_call":
            args = item.get("arguments", "")
            at = {"item_id": item_id, "output_index": oi}
            delta = _ev("response.function_call_arguments.delta", seq, delta=args, **at)
            out.append(build(ResponseFunctionCallArgumentsDeltaEvent, delta))
            fin = _ev("response.function_call_arguments.done", seq, arguments=args, **at)
            out.append(build(ResponseFunctionCallArgumentsDoneEvent, fin))
        done = _ev("response.output_item.done", seq, output_index=oi, item=item)
        out.append(build(ResponseOutputItemDoneEvent, done))
    # The terminal event the stream ended with, by the recorded status.
    ending: Any = {
        "incomplete": ("response.incomplete", ResponseIncompleteEvent),
        "failed": ("response.failed", ResponseFailedEvent),
    }.get(str(data.get("status")), ("response.completed", ResponseCompletedEvent))
    out.append(build(ending[1], _ev(ending[0], seq, response=data)))
    return out


def _ev(kind: str, seq: Any, **fields: Any) -> dict[str, Any]:
    return {"type": kind, "sequence_number": next(seq), **fields}


RESPONSES = StreamSpec(
    target=("responses", "create"),
    deltas=responses_deltas,
    assemble=responses_assemble,
    replay=responses_replay,
    final=responses_final,
    ending=responses_final,
)
