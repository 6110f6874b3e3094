"""A scripted OpenAI-compatible model on 127.0.0.1 for the Agents SDK tests: the
Responses API (``POST /v1/responses``, JSON or SSE with ``stream: true``) and Chat
Completions (``POST /v1/chat/completions``, for ``OpenAIChatCompletionsModel``).

The model name picks the script; each reply depends only on the conversation it is
sent (which tool outputs it holds), so a replayed run and a live one see the same
model. Every reply carries fresh random ids and the current time, as a real server's
do. It counts the requests it answers, per model (``server.requests``,
``server.by_model``), so a test can tell a recorded turn from one asked again.

Scripts (tool calls the model makes until their outputs are in the conversation):

- ``refund``: ``refund(order_id="A-1", cents=500)``, then ``done: <its output>``.
- ``parallel``: ``refund(...)`` and ``notify(customer="ana", text="refunded")`` in one
  turn, then ``done: <output 1> | <output 2>``.
- ``approve``: ``close_account(user="bob")``, then ``done: <its output>``.
- ``mixed``: ``refund(...)`` and ``close_account(...)`` in one turn.
- ``triage``: hands off (``transfer_to_billing``); the billing agent runs ``refund``.
- ``leaky``: a 400 whose message quotes the request's ``Authorization`` header.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SCRIPTS: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "refund": [("refund", {"order_id": "A-1", "cents": 500})],
    "parallel": [
        ("refund", {"order_id": "A-1", "cents": 500}),
        ("notify", {"customer": "ana", "text": "refunded"}),
    ],
    "approve": [("close_account", {"user": "bob"})],
    "mixed": [
        ("refund", {"order_id": "A-1", "cents": 500}),
        ("close_account", {"user": "bob"}),
    ],
    "triage": [("transfer_to_billing", {})],
}


def _rid(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:16]}"


def decide(model: str, outputs: dict[str, str]) -> list[tuple[str, dict[str, Any]]] | str:
    """The next move of ``model`` given the tool outputs so far (by tool name): the
    calls to make, or the final text."""
    calls = SCRIPTS[model]
    if model == "triage":
        return calls
    if all(name in outputs for name, _ in calls):
        return "done: " + " | ".join(outputs[name] for name, _ in calls)
    return calls


def responses_outputs(items: Any) -> dict[str, str]:
    """Tool outputs by tool name, from a Responses API input."""
    if isinstance(items, str):
        return {}
    names = {i["call_id"]: i["name"] for i in items if i.get("type") == "function_call"}
    return {
        names[i["call_id"]]: str(i["output"])
        for i in items
        if i.get("type") == "function_call_output" and i["call_id"] in names
    }


def chat_outputs(messages: list[dict[str, Any]]) -> dict[str, str]:
    """Tool outputs by tool name, from a Chat Completions conversation."""
    names: dict[str, str] = {}
    for m in messages:
        for c in m.get("tool_calls") or []:
            names[c["id"]] = c["function"]["name"]
    return {
        names[m["tool_call_id"]]: str(m["content"])
        for m in messages
        if m.get("role") == "tool" and m.get("tool_call_id") in names
    }


def _usage() -> dict[str, Any]:
    return {
        "input_tokens": 30,
        "output_tokens": 7,
        "total_tokens": 37,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens_details": {"reasoning_tokens": 0},
    }


def responses_reply(body: dict[str, Any]) -> dict[str, Any]:
    """A Responses API response for ``body``."""
    move = decide(body["model"], responses_outputs(body.get("input", [])))
    output: list[dict[str, Any]]
    if isinstance(move, str):
        output = [
            {
                "type": "message",
                "id": _rid("msg"),
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": move, "annotations": []}],
            }
        ]
    else:
        output = [
            {
                "type": "function_call",
                "id": _rid("fc"),
                "call_id": _rid("call"),
                "name": name,
                "arguments": json.dumps(args),
                "status": "completed",
            }
            for name, args in move
        ]
    return {
        "id": _rid("resp"),
        "object": "response",
        "created_at": time.time(),
        "model": body["model"],
        "status": "completed",
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": _usage(),
    }


def responses_events(response: dict[str, Any]) -> list[dict[str, Any]]:
    """The SSE events of ``response``: created, each item added / its deltas / done,
    completed."""
    seq = iter(range(1_000_000))
    started = {**response, "status": "in_progress", "output": [], "usage": None}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": started, "sequence_number": next(seq)}
    ]
    for n, item in enumerate(response["output"]):
        if item["type"] == "message":
            text = item["content"][0]["text"]
            empty = {**item, "status": "in_progress", "content": []}
            events.append(
                {
                    "type": "response.output_item.added",
                    "item": empty,
                    "output_index": n,
                    "sequence_number": next(seq),
                }
            )
            for piece in [text[i : i + 4] for i in range(0, len(text), 4)]:
                events.append(
                    {
                        "type": "response.output_text.delta",
                        "item_id": item["id"],
                        "output_index": n,
                        "content_index": 0,
                        "delta": piece,
                        "logprobs": [],
                        "sequence_number": next(seq),
                    }
                )
        else:
            events.append(
                {
                    "type": "response.output_item.added",
                    "item": {**item, "arguments": "", "status": "in_progress"},
                    "output_index": n,
                    "sequence_number": next(seq),
                }
            )
            events.append(
                {
                    "type": "response.function_call_arguments.delta",
                    "item_id": item["id"],
                    "output_index": n,
                    "delta": item["arguments"],
                    "sequence_number": next(seq),
                }
            )
        events.append(
            {
                "type": "response.output_item.done",
                "item": item,
                "output_index": n,
                "sequence_number": next(seq),
            }
        )
    events.append(
        {"type": "response.completed", "response": response, "sequence_number": next(seq)}
    )
    return events


def chat_reply(body: dict[str, Any]) -> dict[str, Any]:
    """A chat completion for ``body``."""
    move = decide(body["model"], chat_outputs(body["messages"]))
    message: dict[str, Any] = {"role": "assistant", "content": None}
    if isinstance(move, str):
        message["content"] = move
    else:
        message["tool_calls"] = [
            {
                "id": _rid("call"),
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
            for name, args in move
        ]
    return {
        "id": _rid("chatcmpl"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body["model"],
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "stop" if isinstance(move, str) else "tool_calls",
                "logprobs": None,
            }
        ],
        "usage": {"prompt_tokens": 30, "completion_tokens": 7, "total_tokens": 37},
    }


class AgentsModelServer:
    """The server, in a thread of this process: ``.url`` (the ``/v1`` base),
    ``.requests``, ``.by_model``, ``.close()``. ``chunk_delay_s`` holds an SSE stream
    open between events."""

    def __init__(self, chunk_delay_s: float = 0.0) -> None:
        self.requests = 0
        self.by_model: dict[str, int] = {}
        self.chunk_delay_s = chunk_delay_s
        lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _json(self, status: int, payload: Any) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _sse(self, events: list[dict[str, Any]]) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("connection", "close")
                self.end_headers()
                for e in events:
                    self.wfile.write(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode())
                    self.wfile.flush()
                    if outer.chunk_delay_s:
                        time.sleep(outer.chunk_delay_s)
                self.close_connection = True

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                with lock:
                    outer.requests += 1
                    model = str(body.get("model"))
                    outer.by_model[model] = outer.by_model.get(model, 0) + 1
                if model == "leaky":  # a gateway quoting the request's credential back
                    auth = self.headers.get("authorization", "")
                    self._json(400, {"error": {"message": f"bad credential {auth!r}"}})
                elif self.path.endswith("/responses"):
                    reply = responses_reply(body)
                    if body.get("stream"):
                        self._sse(responses_events(reply))
                    else:
                        self._json(200, reply)
                elif self.path.endswith("/chat/completions"):
                    self._json(200, chat_reply(body))
                else:
                    self._json(404, {"error": {"message": f"no route {self.path}"}})

            def log_message(self, *_: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        """Stop serving."""
        self.httpd.shutdown()
        self.httpd.server_close()
