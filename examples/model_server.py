"""A small offline model for the agent examples: an HTTP server on 127.0.0.1 that speaks
the OpenAI chat-completions and the Anthropic Messages wire formats, so the real
``openai`` and ``anthropic`` clients talk to it unchanged.

It plays a support model that refunds an order: asked about an order, it calls
``lookup_order``; given the order, it calls ``issue_refund`` for its amount; given the
refund, it answers in words. It counts the requests it answers (``/stats``), so a demo
can show which model calls a resumed run asked again (none that were recorded).

Asked with ``stream=True`` it streams the same reply as Server-Sent Events in either
format (the text a word at a time, ``STREAM_GAP_S`` apart), for agents that stream
their model calls. Run it alone with ``python examples/model_server.py [PORT]``.
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "demo-model"


def _decide(turns: list[tuple[str, Any]]) -> tuple[str, dict[str, Any]] | str:
    """The next move given the conversation as ``(kind, content)`` pairs, kind being
    ``user``, ``lookup`` or ``refund``: a tool call ``(name, args)`` or the final text."""
    refunds = [c for k, c in turns if k == "refund"]
    if refunds:
        r = refunds[-1]
        if "error" in r:
            return f"I could not refund the order: {r['error']}."
        return (
            f"Refunded ${r['amount_usd']:.2f} for order {r['order_id']} (refund {r['refund_id']})."
        )
    lookups = [c for k, c in turns if k == "lookup"]
    if lookups:
        order = lookups[-1]
        return ("issue_refund", {"order_id": order["order_id"], "amount_usd": order["total_usd"]})
    text = " ".join(str(c) for k, c in turns if k == "user")
    found = re.search(r"[A-Z]-\d+", text)
    return ("lookup_order", {"order_id": found.group(0) if found else "A-1"})


def _tool_kind(content: Any) -> str:
    data = json.loads(content) if isinstance(content, str) else content
    return (
        "refund"
        if isinstance(data, dict) and ("refund_id" in data or "error" in data)
        else "lookup"
    )


def _openai_turns(body: dict[str, Any]) -> list[tuple[str, Any]]:
    turns: list[tuple[str, Any]] = []
    for m in body["messages"]:
        if m["role"] == "user":
            turns.append(("user", m["content"]))
        elif m["role"] == "tool":
            turns.append((_tool_kind(m["content"]), json.loads(m["content"])))
    return turns


def _anthropic_turns(body: dict[str, Any]) -> list[tuple[str, Any]]:
    turns: list[tuple[str, Any]] = []
    for m in body["messages"]:
        if m["role"] != "user":
            continue
        content = m["content"]
        if isinstance(content, str):
            turns.append(("user", content))
            continue
        for block in content:
            if block.get("type") == "tool_result":
                turns.append((_tool_kind(block["content"]), json.loads(block["content"])))
            elif block.get("type") == "text":
                turns.append(("user", block["text"]))
    return turns


def openai_reply(body: dict[str, Any], n: int) -> dict[str, Any]:
    """A chat completion for request number ``n``."""
    move = _decide(_openai_turns(body))
    message: dict[str, Any] = {"role": "assistant", "content": None}
    if isinstance(move, str):
        message["content"] = move
    else:
        name, args = move
        message["tool_calls"] = [
            {
                "id": f"call_{n}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
        ]
    prompt = sum(len(json.dumps(m)) for m in body["messages"]) // 4
    return {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion",
        "created": 1700000000 + n,
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "stop" if isinstance(move, str) else "tool_calls",
                "logprobs": None,
            }
        ],
        "usage": {"prompt_tokens": prompt, "completion_tokens": 20, "total_tokens": prompt + 20},
    }


def anthropic_reply(body: dict[str, Any], n: int) -> dict[str, Any]:
    """An Anthropic message for request number ``n``."""
    move = _decide(_anthropic_turns(body))
    if isinstance(move, str):
        content: list[dict[str, Any]] = [{"type": "text", "text": move}]
    else:
        name, args = move
        content = [
            {"type": "text", "text": f"Calling {name}."},
            {"type": "tool_use", "id": f"toolu_{n}", "name": name, "input": args},
        ]
    prompt = sum(len(json.dumps(m)) for m in body["messages"]) // 4
    return {
        "id": f"msg_{n}",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": content,
        "stop_reason": "end_turn" if isinstance(move, str) else "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": prompt, "output_tokens": 20},
    }


# Streamed replies (stream=True): the reply's text goes out a word at a time, this far
# apart, so `durably runs tail RUN --follow` shows the tokens arriving.
STREAM_GAP_S = 0.03


def _sse(payload: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(payload)}\n\n".encode()


def _words(text: str) -> list[str]:
    return re.findall(r"\S+\s*|\s+", text) or [""]


def openai_events(reply: dict[str, Any], body: dict[str, Any]) -> list[bytes]:
    """``reply`` (a chat completion) as the chunks of a streamed one."""
    base = {k: reply[k] for k in ("id", "created", "model")}
    base["object"] = "chat.completion.chunk"
    choice, message = reply["choices"][0], reply["choices"][0]["message"]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        one = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
        return _sse({**base, "choices": [one]})

    out = [chunk({"role": "assistant", "content": ""})]
    out += [chunk({"content": w}) for w in _words(message["content"] or "")]
    for i, call in enumerate(message.get("tool_calls") or []):
        fn = call["function"]
        head = {"index": i, "id": call["id"], "type": "function"}
        out.append(chunk({"tool_calls": [{**head, "function": {"name": fn["name"]}}]}))
        out.append(
            chunk({"tool_calls": [{"index": i, "function": {"arguments": fn["arguments"]}}]})
        )
    out.append(chunk({}, choice["finish_reason"]))
    if (body.get("stream_options") or {}).get("include_usage"):
        out.append(_sse({**base, "choices": [], "usage": reply["usage"]}))
    return [*out, b"data: [DONE]\n\n"]


def anthropic_events(reply: dict[str, Any]) -> list[bytes]:
    """``reply`` (a message) as the raw events of a streamed one."""
    start = {**reply, "content": [], "stop_reason": None, "usage": {**reply["usage"]}}
    start["usage"]["output_tokens"] = 1
    out = [_sse({"type": "message_start", "message": start}, "message_start")]
    for i, block in enumerate(reply["content"]):
        empty = {**block, "text": ""} if block["type"] == "text" else {**block, "input": {}}
        out.append(
            _sse(
                {"type": "content_block_start", "index": i, "content_block": empty},
                "content_block_start",
            )
        )
        if block["type"] == "text":
            deltas = [{"type": "text_delta", "text": w} for w in _words(block["text"])]
        else:
            deltas = [{"type": "input_json_delta", "partial_json": json.dumps(block["input"])}]
        for d in deltas:
            event = {"type": "content_block_delta", "index": i, "delta": d}
            out.append(_sse(event, "content_block_delta"))
        out.append(_sse({"type": "content_block_stop", "index": i}, "content_block_stop"))
    tail = {"stop_reason": reply["stop_reason"], "stop_sequence": None}
    usage = {"output_tokens": reply["usage"]["output_tokens"]}
    out.append(_sse({"type": "message_delta", "delta": tail, "usage": usage}, "message_delta"))
    return [*out, _sse({"type": "message_stop"}, "message_stop")]


class ModelServer:
    """The server, in a thread of this process: ``.url``, ``.requests``, ``.close()``."""

    def __init__(self, port: int = 0) -> None:
        self.requests = 0
        lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, status: int, payload: Any) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, frames: list[bytes]) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("connection", "close")
                self.end_headers()
                for frame in frames:
                    self.wfile.write(frame)
                    self.wfile.flush()
                    time.sleep(STREAM_GAP_S)

            def do_GET(self) -> None:
                self._send(200, {"requests": outer.requests})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                with lock:
                    outer.requests += 1
                    n = outer.requests
                if self.path.endswith("/chat/completions"):
                    reply = openai_reply(body, n)
                    if body.get("stream"):
                        self._stream(openai_events(reply, body))
                    else:
                        self._send(200, reply)
                elif self.path.endswith("/messages"):
                    reply = anthropic_reply(body, n)
                    if body.get("stream"):
                        self._stream(anthropic_events(reply))
                    else:
                        self._send(200, reply)
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})

            def log_message(self, *_: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        """Stop serving."""
        self.httpd.shutdown()
        self.httpd.server_close()


if __name__ == "__main__":
    server = ModelServer(int(sys.argv[1]) if len(sys.argv) > 1 else 8765)
    print(f"serving the demo model at {server.url} (OpenAI: {server.url}/v1)", flush=True)
    threading.Event().wait()
