"""A small offline model for the agent examples: an HTTP server on 127.0.0.1 that speaks
the OpenAI chat-completions and the Anthropic Messages wire formats, so the real
``openai`` and ``anthropic`` clients talk to it unchanged.

It plays a support model that refunds an order: asked about an order, it calls
``lookup_order``; given the order, it calls ``issue_refund`` for its amount; given the
refund, it answers in words. It counts the requests it answers (``/stats``), so a demo
can show which model calls a resumed run asked again (none that were recorded).

Run it alone with ``python examples/model_server.py [PORT]``.
"""

from __future__ import annotations

import json
import re
import sys
import threading
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

            def do_GET(self) -> None:
                self._send(200, {"requests": outer.requests})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                with lock:
                    outer.requests += 1
                    n = outer.requests
                if self.path.endswith("/chat/completions"):
                    self._send(200, openai_reply(body, n))
                elif self.path.endswith("/messages"):
                    self._send(200, anthropic_reply(body, n))
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
