"""The agent of test_branches_crash.py: ``python branches_agent.py JOURNAL_URL WORLD_DB
RUN_ID MARKER HANG``. A sync workflow runs two listed tool calls in a thread pool (as
LangChain's sync agents do), each in its ``ctx.branches`` branch. Branch 1 runs its two
steps; branch 0 runs its first step, waits for branch 1 to end, and then, with ``HANG`` =
1, touches ``MARKER`` and hangs in the framework's code before its second step (the test
SIGKILLs the process there); with 0 it goes on. Prints the result as JSON.
"""

from __future__ import annotations

import contextvars
import json
import pathlib
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from agent import WORLD_LOCK, world  # the same world as the crash matrix

import durably


def main() -> None:
    journal, world_db, run_id, marker, hang = sys.argv[1:6]
    w = world(world_db)

    def tool(name: str) -> object:
        @durably.step(effect=True)
        def call(*, idempotency_key: str) -> str:
            with WORLD_LOCK:
                w.execute("INSERT INTO executions VALUES (?, ?)", (name, idempotency_key))
            return f"{name}@{idempotency_key.rsplit(':', 1)[-1]}"

        return call

    # The default lease: the next process takes the run over at once all the same (its
    # owner's pid is gone on this host), and a short lease was one a loaded machine could
    # let lapse mid-run (the run stopped, StaleLease, and the test failed for nothing).
    engine = durably.Engine(journal)
    other_done = threading.Event()

    @engine.workflow(name="tools")
    def tools(ctx: durably.Context) -> list[str]:
        group = ctx.branches(["search", "fetch"])

        def first() -> str:
            with group.branch(0):
                a = ctx.step("search", tool("search"))
                other_done.wait(30)
                if hang == "1":
                    pathlib.Path(marker).touch()
                    time.sleep(600)  # killed here, between this branch's steps
                return f"{a}+{ctx.step('search_more', tool('search_more'))}"

        def second() -> str:
            try:
                with group.branch(1):
                    return f"{ctx.step('fetch', tool('fetch'))}+{ctx.step('read', tool('read'))}"
            finally:
                other_done.set()

        with ThreadPoolExecutor(max_workers=2) as pool:
            futures = [pool.submit(contextvars.copy_context().run, f) for f in (first, second)]
            out = [f.result() for f in futures]
        return [*out, ctx.step("answer", lambda: "answer")]

    print(json.dumps(engine.run(tools, run_id=run_id)))


if __name__ == "__main__":
    main()
