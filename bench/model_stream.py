"""How fast a streamed model call's tokens reach a follower and the caller.

A local OpenAI-compatible server on 127.0.0.1 streams a chat completion (a text chunk
every ``--gap-ms``, the first one at once) and notes when it wrote the first text
chunk. Two figures, measured now, in this run:

- **server -> follower**: from the server writing the first text chunk to a follower in
  *another process* (``engine.follow``) reading the first ``model.delta`` of the call.
  SQLite follows with ``poll_s=0.05``; PostgreSQL is woken by ``LISTEN/NOTIFY`` at the
  default ``poll_s``. Target: under 100 ms (median).
- **caller's time to first chunk**: from calling ``create(stream=True)`` to holding the
  first text chunk, the wrapped client inside a workflow against the bare client,
  alternating calls (median of each, and their ratio).
- **the caller's cost of the deltas**: microseconds per chunk of ``ctx.step_stream``
  with ``deltas=`` (each chunk a ``model.delta`` handed to the stream writer) against
  without (5,000 chunks, alternating rounds): what "never slows the caller" costs.

    python bench/model_stream.py [--pg postgresql://...] [--calls 20] [--gap-ms 20]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import openai

import durably
from durably.integrations.openai import wrap

WORDS = ["The ", "order ", "A-17 ", "ships ", "today ", "by ", "noon."]
MESSAGES = [{"role": "user", "content": "Where is order A-17?"}]

FOLLOWER = r"""
import json, sys, time
import durably
url, run_id, poll_s = sys.argv[1], sys.argv[2], float(sys.argv[3])
engine = durably.Engine(url)
while True:
    try:
        engine.events(run_id)
        break
    except durably.RunNotFound:
        time.sleep(0.005)
print("ready", flush=True)
for e in engine.follow(run_id, poll_s=poll_s):
    if e.kind == "model.delta":
        print(json.dumps({"read_at": time.time()}), flush=True)
        break
engine.close()
"""


class Server:
    """Streams WORDS as chat-completion chunks; ``first_text_at`` per request."""

    def __init__(self, gap_s: float) -> None:
        self.first_text_at: list[float] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                n = int(self.headers.get("content-length") or 0)
                self.rfile.read(n)
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("connection", "close")
                self.end_headers()
                base = {"id": "c1", "object": "chat.completion.chunk", "created": 1}
                base["model"] = "bench"
                for i, word in enumerate(WORDS):
                    choice = {"index": 0, "delta": {"content": word}, "finish_reason": None}
                    if i == 0:
                        choice["delta"]["role"] = "assistant"
                    frame = f"data: {json.dumps({**base, 'choices': [choice]})}\n\n"
                    self.wfile.write(frame.encode())
                    self.wfile.flush()
                    if i == 0:
                        outer.first_text_at.append(time.time())
                    time.sleep(gap_s)
                done = {"index": 0, "delta": {}, "finish_reason": "stop"}
                self.wfile.write(f"data: {json.dumps({**base, 'choices': [done]})}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")

            def log_message(self, *_: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()


@contextmanager
def server(gap_s: float) -> Iterator[Server]:
    s = Server(gap_s)
    try:
        yield s
    finally:
        s.httpd.shutdown()
        s.httpd.server_close()


def follower_latency(url: str, srv: Server, calls: int, poll_s: float) -> list[float]:
    """Milliseconds from the server's first text chunk to a follower's first delta."""
    engine = durably.Engine(url)
    client = wrap(openai.OpenAI(api_key="sk-bench", base_url=srv.url))

    @engine.workflow(name="streamed")
    def streamed(ctx: durably.Context) -> str:
        stream = client.chat.completions.create(model="bench", messages=MESSAGES, stream=True)
        return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)

    out = []
    try:
        for _ in range(calls):
            run_id = f"f-{uuid.uuid4().hex[:8]}"
            proc = subprocess.Popen(
                [sys.executable, "-c", FOLLOWER, url, run_id, str(poll_s)],
                stdout=subprocess.PIPE,
                text=True,
            )
            assert proc.stdout is not None
            engine.start(streamed, run_id=run_id)  # created: the follower can begin
            assert proc.stdout.readline().strip() == "ready"
            engine.resume(run_id)
            read_at = json.loads(proc.stdout.readline())["read_at"]
            proc.wait(30)
            proc.stdout.close()
            out.append((read_at - srv.first_text_at[-1]) * 1000)
    finally:
        engine.close()
    return out


def first_chunk(url: str, srv: Server, calls: int) -> tuple[list[float], list[float]]:
    """Milliseconds to the first text chunk: bare client, wrapped in a workflow."""
    engine = durably.Engine(url)
    bare_client = openai.OpenAI(api_key="sk-bench", base_url=srv.url)
    wrapped_client = wrap(openai.OpenAI(api_key="sk-bench", base_url=srv.url))
    marks: list[float] = []

    @engine.workflow(name="ttfc")
    def ttfc(ctx: durably.Context) -> int:
        t0 = time.perf_counter()
        stream = wrapped_client.chat.completions.create(
            model="bench", messages=MESSAGES, stream=True
        )
        n = 0
        for _ in stream:
            if n == 0:
                marks.append((time.perf_counter() - t0) * 1000)
            n += 1
        return n

    bare, wrapped = [], []
    try:
        for i in range(calls):
            t0 = time.perf_counter()
            stream = bare_client.chat.completions.create(
                model="bench", messages=MESSAGES, stream=True
            )
            next(iter(stream))
            bare.append((time.perf_counter() - t0) * 1000)
            for _ in stream:
                pass
            engine.run(ttfc, run_id=f"t-{i}-{uuid.uuid4().hex[:6]}")
            wrapped.append(marks[-1])
    finally:
        engine.close()
    return bare, wrapped


def per_chunk_cost(url: str, chunks: int, rounds: int) -> tuple[float, float]:
    """Microseconds per chunk of ``ctx.step_stream`` without and with ``deltas=`` (every
    chunk a ``model.delta`` handed to the stream writer), alternating rounds, medians."""
    engine = durably.Engine(url)
    words = [f"w{i} " for i in range(chunks)]

    @engine.workflow(name="per_chunk")
    def per_chunk(ctx: durably.Context, with_deltas: bool) -> int:
        deltas = (lambda c: [{"text": c}]) if with_deltas else None
        t0 = time.perf_counter()
        n = sum(1 for _ in ctx.step_stream("s", lambda: iter(words), deltas=deltas))
        marks.append((time.perf_counter() - t0) / n * 1e6)
        return n

    marks: list[float] = []
    plain, published = [], []
    try:
        for r in range(rounds):
            for with_deltas, out in ((False, plain), (True, published)):
                engine.run(
                    per_chunk, with_deltas, run_id=f"p-{r}-{with_deltas}-{uuid.uuid4().hex[:6]}"
                )
                out.append(marks[-1])
        engine.store.flush_stream(30)
    finally:
        engine.close()
    return statistics.median(plain), statistics.median(published)


def _row(name: str, ms: list[float]) -> str:
    q = statistics.quantiles(ms, n=10) if len(ms) >= 2 else ms * 9
    return f"{name:<44} median {statistics.median(ms):7.1f} ms   p90 {q[8]:7.1f} ms"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pg", help="also measure on this PostgreSQL URL")
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--gap-ms", type=float, default=20.0)
    args = ap.parse_args()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp, server(args.gap_ms / 1000) as srv:
        sqlite_url = f"sqlite:///{tmp}/bench.db"
        targets = [("SQLite, follow(poll_s=0.05)", sqlite_url, 0.05)]
        if args.pg:
            targets.append(("PostgreSQL, NOTIFY (default poll_s)", args.pg, 0.2))
        for name, url, poll_s in targets:
            ms = follower_latency(url, srv, args.calls, poll_s)
            results[name] = statistics.median(ms)
            print(_row(f"server -> follower, {name}", ms))
        bare, wrapped = first_chunk(sqlite_url, srv, args.calls)
        print(_row("first chunk, bare client", bare))
        print(_row("first chunk, wrapped client in a workflow", wrapped))
        ratio = statistics.median(wrapped) / statistics.median(bare)
        print(f"time to first chunk, wrapped / bare: {ratio:.2f}x")
        plain, published = per_chunk_cost(sqlite_url, 5_000, 3)
        print(
            f"ctx.step_stream per chunk: {plain:.1f} us without deltas, {published:.1f} us"
            f" with a model.delta each ({published / plain:.2f}x)"
        )
    slow = [n for n, ms in results.items() if ms >= 100]
    if slow:
        print(f"over the 100 ms target: {', '.join(slow)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
