"""Local HTTP servers speaking the OpenAI and Anthropic wire formats, for driving the real
clients in tests (no network, no mock of the client). Each counts its requests and keeps
their bodies and headers."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# (path, request body) -> (status, headers, response body)
Reply = tuple[int, dict[str, str], Any]
Script = Callable[[str, dict[str, Any]], Reply]


@dataclass
class Seen:
    """One request the server received."""

    path: str
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


class ModelServer:
    """A threaded HTTP server on 127.0.0.1 answering with ``script``."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.seen: list[Seen] = []
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                n = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(n) or b"{}")
                with outer._lock:
                    outer.seen.append(
                        Seen(self.path, body, {k.lower(): v for k, v in self.headers.items()})
                    )
                status, headers, payload = outer.script(self.path, body)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *_: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def count(self, path_part: str = "") -> int:
        with self._lock:
            return sum(1 for s in self.seen if path_part in s.path)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def chat_completion(
    content: str | None = "hello",
    tool_calls: list[dict[str, Any]] | None = None,
    prompt_tokens: int = 10,
    completion_tokens: int = 5,
    model: str = "gpt-test",
) -> dict[str, Any]:
    """A ``chat.completion`` response body."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1700000000,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if tool_calls else "stop",
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def tool_call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """One ``tool_calls`` entry of a chat completion."""
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


def response(text: str = "hello", input_tokens: int = 10, output_tokens: int = 5) -> Any:
    """A Responses API ``response`` body."""
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 1700000000,
        "model": "gpt-test",
        "status": "completed",
        "output": [
            {
                "type": "message",
                "id": "msg_1",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        ],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "total_tokens": input_tokens + output_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    }


def anthropic_message(
    text: str = "hello",
    tool_use: dict[str, Any] | None = None,
    input_tokens: int = 10,
    output_tokens: int = 5,
) -> dict[str, Any]:
    """An Anthropic ``message`` response body."""
    content: list[dict[str, Any]] = [{"type": "text", "text": text}]
    if tool_use is not None:
        content.append({"type": "tool_use", **tool_use})
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": content,
        "stop_reason": "tool_use" if tool_use else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
    }
