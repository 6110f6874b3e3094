"""Runs that all send one shared large argument (a system prompt): its blob is stored
once, and each later run's first step cites it again. Since retention (issue 30) that
citation of a stored blob counts a touch under the blob row's lock (put_blob's ON
CONFLICT DO UPDATE, so a prune's sweep and a citation serialise) where it did nothing
before. Prints runs per second; compare two trees in one run with
``python bench/ab.py OLD_SRC NEW_SRC bench/shared_blob.py [--pg URL]``.

Run: ``python bench/shared_blob.py [--runs 200] [--threads 4] [--pg URL] [--dir PATH]``
(``--pg``: a URL naming a schema of its own, e.g. ``...?options=-csearch_path%3Dbench``).
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
import uuid
from pathlib import Path

import durably

PROMPT = "You are a careful assistant. " * 200  # ~5.8 KB: kept in the blob table


def answer(prompt: str, question: str) -> str:
    return f"{len(prompt)}:{question}"


def _engine(url: str) -> durably.Engine:
    engine = durably.Engine(url)

    @engine.workflow(name="ask")
    def ask(ctx: durably.Context, question: str) -> str:
        return ctx.step("answer", answer, PROMPT, question)

    return engine


def _rate(url: str, runs: int, threads: int) -> float:
    engine = _engine(url)
    tag = uuid.uuid4().hex[:8]
    engine.run("ask", "warm", run_id=f"{tag}-warm")  # the blob is stored from here on
    per = runs // threads

    def work(t: int) -> None:
        for i in range(per):
            engine.run("ask", f"q{i}", run_id=f"{tag}-{t}-{i}")

    started = time.perf_counter()
    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - started
    engine.close()
    return per * threads / elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--pg", default=None, help="a PostgreSQL URL (default: SQLite only)")
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        url = f"sqlite:///{Path(d) / 'j.db'}"
        print(f"sqlite runs/s (1 thread): {_rate(url, args.runs, 1):,.1f}")
    if args.pg:
        rate = _rate(args.pg, args.runs, args.threads)
        print(f"postgres runs/s ({args.threads} threads): {rate:,.1f}")


if __name__ == "__main__":
    main()
