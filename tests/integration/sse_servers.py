"""A local server on 127.0.0.1 that streams model turns as Server-Sent Events in both wire
formats the real clients read: OpenAI chat completions (``data:`` chunks, ``[DONE]``),
OpenAI Responses (typed events) and Anthropic Messages (typed events). It holds the
stream open between chunks (``delay_s``), can stop after the first chunks until told to
go on (``hold``: a follower reads deltas of a call that is not recorded yet; a test
SIGKILLs the streaming process meanwhile), can close every stream early (``cut_after``
frames), and counts the requests of each turn.

A turn is :class:`Turn` (text, then optionally one tool call), chosen by ``script`` from
the request body. The text goes out in pieces of ``piece_chars`` characters and the tool
call's arguments in pieces too, so deltas arrive as several events.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Turn:
    """What the model says in one turn: text, then an optional tool call."""

    text: str
    tool: tuple[str, dict[str, Any]] | None = None
    input_tokens: int = 11
    output_tokens: int = 7
    call_id: str = "call_1"


Script = Callable[[str, dict[str, Any]], Turn]


@dataclass
class Hold:
    """Pause every stream after ``after`` chunks until ``go`` is set (or ``timeout_s``)."""

    after: int = 2
    go: threading.Event = field(default_factory=threading.Event)
    reached: threading.Event = field(default_factory=threading.Event)
    timeout_s: float = 20.0


def pieces(text: str, n: int) -> list[str]:
    return [text[i : i + n] for i in range(0, len(text), n)] or [""]


class SSEServer:
    """A threaded HTTP server on 127.0.0.1 streaming the turns ``script`` picks."""

    def __init__(
        self,
        script: Script,
        delay_s: float = 0.01,
        piece_chars: int = 4,
        hold: Hold | None = None,
        cut_after: int | None = None,
    ) -> None:
        self.script = script
        self.cut_after = cut_after  # close each stream after this many frames
        self.delay_s = delay_s
        self.piece_chars = piece_chars
        self.hold = hold
        self.seen: list[tuple[str, dict[str, Any]]] = []
        self.first_chunk_at: list[float] = []  # time.time() of each stream's first chunk
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                n = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(n) or b"{}")
                with outer._lock:
                    outer.seen.append((self.path, body))
                turn = outer.script(self.path, body)
                if not body.get("stream"):
                    self.send_error(400, "this server only streams")
                    return
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                self.send_header("connection", "close")
                self.end_headers()
                outer._stream(self, self.path, body, turn)

            def log_message(self, *_: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def count(self, path_part: str = "") -> int:
        with self._lock:
            return sum(1 for p, _ in self.seen if path_part in p)

    def close(self) -> None:
        if self.hold is not None:
            self.hold.go.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def _stream(self, h: BaseHTTPRequestHandler, path: str, body: Any, turn: Turn) -> None:
        if path.endswith("/chat/completions"):
            events = _chat(turn, body, self.piece_chars)
        elif path.endswith("/responses"):
            events = _responses(turn, self.piece_chars)
        else:
            events = _anthropic(turn, self.piece_chars)
        try:
            for i, frame in enumerate(events):
                if self.cut_after is not None and i >= self.cut_after:
                    return  # the connection closes mid-stream
                if i == 0:
                    with self._lock:
                        self.first_chunk_at.append(time.time())
                h.wfile.write(frame.encode())
                h.wfile.flush()
                if self.hold is not None and i + 1 == self.hold.after:
                    self.hold.reached.set()
                    self.hold.go.wait(self.hold.timeout_s)
                elif self.delay_s:
                    time.sleep(self.delay_s)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client went away (killed mid-stream)


def _data(obj: Any, event: str | None = None) -> str:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(obj)}\n\n"


def _chat(turn: Turn, body: Any, n: int) -> Iterator[str]:
    base = {"id": "chatcmpl-s1", "object": "chat.completion.chunk", "created": 1700000000}
    base["model"] = body.get("model", "gpt-test")

    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
        return _data({**base, "choices": [choice]})

    yield chunk({"role": "assistant", "content": ""})
    for p in pieces(turn.text, n):
        yield chunk({"content": p})
    if turn.tool is not None:
        name, args = turn.tool
        first = {"index": 0, "id": turn.call_id, "type": "function"}
        yield chunk({"tool_calls": [{**first, "function": {"name": name, "arguments": ""}}]})
        for p in pieces(json.dumps(args), n):
            yield chunk({"tool_calls": [{"index": 0, "function": {"arguments": p}}]})
    yield chunk({}, "tool_calls" if turn.tool else "stop")
    if (body.get("stream_options") or {}).get("include_usage"):
        usage = {
            "prompt_tokens": turn.input_tokens,
            "completion_tokens": turn.output_tokens,
            "total_tokens": turn.input_tokens + turn.output_tokens,
        }
        yield _data({**base, "choices": [], "usage": usage})
    yield "data: [DONE]\n\n"


def _responses(turn: Turn, n: int) -> Iterator[str]:
    seq = iter(range(10_000))
    resp: dict[str, Any] = {
        "id": "resp_s1",
        "object": "response",
        "created_at": 1700000000,
        "model": "gpt-test",
        "status": "in_progress",
        "output": [],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    }

    def ev(kind: str, **fields: Any) -> str:
        return _data({"type": kind, "sequence_number": next(seq), **fields}, kind)

    yield ev("response.created", response=resp)
    msg_id = "msg_s1"
    at = {"item_id": msg_id, "output_index": 0, "content_index": 0}
    item = {"type": "message", "id": msg_id, "status": "in_progress", "role": "assistant"}
    yield ev("response.output_item.added", output_index=0, item={**item, "content": []})
    part = {"type": "output_text", "text": "", "annotations": []}
    yield ev("response.content_part.added", part=part, **at)
    for p in pieces(turn.text, n):
        yield ev("response.output_text.delta", delta=p, logprobs=[], **at)
    yield ev("response.output_text.done", text=turn.text, logprobs=[], **at)
    done_part = {**part, "text": turn.text}
    yield ev("response.content_part.done", part=done_part, **at)
    done_msg = {**item, "status": "completed", "content": [done_part]}
    yield ev("response.output_item.done", output_index=0, item=done_msg)
    output: list[Any] = [done_msg]
    if turn.tool is not None:
        name, args = turn.tool
        fc = {
            "type": "function_call",
            "id": "fc_s1",
            "call_id": turn.call_id,
            "name": name,
            "arguments": "",
            "status": "in_progress",
        }
        yield ev("response.output_item.added", output_index=1, item=fc)
        text = json.dumps(args)
        for p in pieces(text, n):
            yield ev(
                "response.function_call_arguments.delta", item_id="fc_s1", output_index=1, delta=p
            )
        yield ev(
            "response.function_call_arguments.done", item_id="fc_s1", output_index=1, arguments=text
        )
        fc_done = {**fc, "arguments": text, "status": "completed"}
        yield ev("response.output_item.done", output_index=1, item=fc_done)
        output.append(fc_done)
    usage = {
        "input_tokens": turn.input_tokens,
        "output_tokens": turn.output_tokens,
        "total_tokens": turn.input_tokens + turn.output_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens_details": {"reasoning_tokens": 0},
    }
    final = {**resp, "status": "completed", "output": output, "usage": usage}
    yield ev("response.completed", response=final)


def _anthropic(turn: Turn, n: int) -> Iterator[str]:
    message = {
        "id": "msg_s1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": turn.input_tokens, "output_tokens": 1},
    }
    yield _data({"type": "message_start", "message": message}, "message_start")
    text_block = {"type": "text", "text": ""}
    start = {"type": "content_block_start", "index": 0, "content_block": text_block}
    yield _data(start, "content_block_start")
    for p in pieces(turn.text, n):
        delta = {"type": "content_block_delta", "index": 0}
        yield _data({**delta, "delta": {"type": "text_delta", "text": p}}, "content_block_delta")
    yield _data({"type": "content_block_stop", "index": 0}, "content_block_stop")
    if turn.tool is not None:
        name, args = turn.tool
        block = {"type": "tool_use", "id": turn.call_id, "name": name, "input": {}}
        start = {"type": "content_block_start", "index": 1, "content_block": block}
        yield _data(start, "content_block_start")
        for p in pieces(json.dumps(args), n):
            delta = {"type": "input_json_delta", "partial_json": p}
            event = {"type": "content_block_delta", "index": 1, "delta": delta}
            yield _data(event, "content_block_delta")
        yield _data({"type": "content_block_stop", "index": 1}, "content_block_stop")
    tail = {
        "type": "message_delta",
        "delta": {"stop_reason": "tool_use" if turn.tool else "end_turn", "stop_sequence": None},
        "usage": {"output_tokens": turn.output_tokens},
    }
    yield _data(tail, "message_delta")
    yield _data({"type": "message_stop"}, "message_stop")
