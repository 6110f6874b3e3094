"""What ``durably.integrations.openai.wrap`` adds to a model call, beyond its commits.

Three ways to make the same chat-completions call against a local OpenAI-compatible
server (127.0.0.1, answering at once, so the call itself is a fast local round trip),
measured now, in this run, on the same journal (alternating rounds, median per call):

- ``bare``: the bare ``openai.OpenAI`` client (the baseline: no durability);
- ``by hand``: the same call in a hand-written step that reports its usage
  (``ctx.step`` + ``durably.usage``): the durable commits a recorded model call needs
  (the spend row, then the step's record);
- ``wrapped``: the call through the wrapped client inside the workflow.

``wrapped - by hand`` is the wrapper's own cost (digest of the request body as its
arguments, the typed-result rebuild, the retry bookkeeping); ``by hand - bare`` is the
commits. Target: the wrapper's own cost under 1 ms.

    python bench/model_wrap.py [--pg postgresql://...] [--calls 200] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import openai

import durably
from durably.integrations.openai import wrap

REPLY = json.dumps(
    {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "bench-model",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "ok"},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": {"prompt_tokens": 50, "completion_tokens": 2, "total_tokens": 52},
    }
).encode()

# A short conversation with a system prompt and two tools: a typical agent turn.
MESSAGES = [
    {"role": "system", "content": "You are a support agent. Be brief. " * 8},
    {"role": "user", "content": "Where is order A-17?"},
    {"role": "assistant", "content": "Let me look it up."},
    {"role": "user", "content": "Thanks."},
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": f"tool_{i}",
            "description": "A tool.",
            "parameters": {"type": "object", "properties": {"x": {"type": "string"}}},
        },
    }
    for i in range(2)
]


def serve() -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: the client reuses its connection
        disable_nagle_algorithm = True  # headers and body leave at once (no 40 ms stall)

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["content-length"]))
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(REPLY)))
            self.end_headers()
            self.wfile.write(REPLY)

        def log_message(self, *_: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


@contextmanager
def journal(pg: str | None) -> Iterator[str]:
    """A URL of an empty journal: a SQLite file, or a throwaway PostgreSQL schema."""
    if pg is None:
        with tempfile.TemporaryDirectory() as tmp:
            yield f"sqlite:///{tmp}/journal.db"
        return
    import psycopg

    name = f"bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{name}"')
    sep = "&" if "?" in pg else "?"
    try:
        yield f"{pg}{sep}options=-csearch_path%3D{name}"
    finally:
        with psycopg.connect(pg, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{name}" CASCADE')


def median_ms(times: list[float]) -> float:
    return statistics.median(times) * 1000


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--pg", help="a PostgreSQL URL (default: a SQLite file)")
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args()
    httpd = serve()
    base = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    bare = openai.OpenAI(api_key="bench", base_url=base, max_retries=0)
    wrapped = wrap(openai.OpenAI(api_key="bench", base_url=base))

    def by_hand() -> dict[str, Any]:
        resp = bare.chat.completions.create(model="bench-model", messages=MESSAGES, tools=TOOLS)  # type: ignore[arg-type]
        u = resp.usage
        assert u is not None
        durably.usage(input_tokens=u.prompt_tokens, output_tokens=u.completion_tokens)
        return resp.model_dump(mode="json")

    times: dict[str, list[float]] = {"bare": [], "by hand": [], "wrapped": []}
    with journal(a.pg) as url:
        engine = durably.Engine(url)

        def timed(kind: str, call: Callable[[], Any]) -> Any:
            t0 = time.perf_counter()
            out = call()
            times[kind].append(time.perf_counter() - t0)
            return out

        @engine.workflow(name="bench")
        def bench(ctx: durably.Context, n: int) -> None:
            for _ in range(n):
                timed("by hand", lambda: ctx.step("by-hand", by_hand))
                timed(
                    "wrapped",
                    lambda: wrapped.chat.completions.create(
                        model="bench-model",
                        messages=MESSAGES,  # type: ignore[arg-type]
                        tools=TOOLS,  # type: ignore[arg-type]
                    ),
                )
                timed(
                    "bare",
                    lambda: bare.chat.completions.create(
                        model="bench-model",
                        messages=MESSAGES,  # type: ignore[arg-type]
                        tools=TOOLS,  # type: ignore[arg-type]
                    ),
                )

        engine.run(bench, 10, run_id="warmup")
        for k in times:
            times[k].clear()
        for r in range(a.repeat):
            engine.run(bench, a.calls, run_id=f"round-{r}")
        engine.close()
    httpd.shutdown()
    m = {k: median_ms(v) for k, v in times.items()}
    store = "PostgreSQL" if a.pg else "SQLite (synchronous=FULL)"
    print(f"{a.calls * a.repeat} calls each, {store}, median ms per call:")
    print(f"  bare client                      {m['bare']:7.3f}")
    print(f"  hand-written step (+ commits)    {m['by hand']:7.3f}")
    print(f"  wrapped client                   {m['wrapped']:7.3f}")
    print(f"  commits (by hand - bare)         {m['by hand'] - m['bare']:7.3f}")
    extra = m["wrapped"] - m["by hand"]
    print(f"  wrapper's own (wrapped - by hand){extra:7.3f}  (target < 1 ms)")
    print(f"  wrapped / bare                   {m['wrapped'] / m['bare']:7.2f}x")
    if extra >= 1.0:
        sys.exit("the wrapper's own cost is over its 1 ms target")


if __name__ == "__main__":
    main()
