"""The agent of the gather-approval crash test: ``python gather_approval_agent.py
JOURNAL_URL RUN_ID MARKER HANG`` runs, in one ``ctx.gather``, an approval request and a
branch of two steps. With ``HANG`` = 1 the second step touches ``MARKER`` and hangs (the
test SIGKILLs the process there, after the first step's write); with 0 it returns.
``engine.run`` does not wait while the run is parked (``park_wait_s=0``): it prints the
run's status as JSON and exits.
"""

from __future__ import annotations

import json
import pathlib
import sys
import time

import durably


def main() -> None:
    journal, run_id, marker, hang = sys.argv[1:5]

    def two() -> str:
        if hang == "1":
            pathlib.Path(marker).touch()
            time.sleep(600)  # killed here
        return "two"

    # The default lease: the next process takes the run over at once all the same (its
    # owner's pid is gone on this host), and a short lease was one a loaded machine could
    # let lapse mid-run (the run stopped, StaleLease, and the test failed for nothing).
    engine = durably.Engine(journal, park_wait_s=0)

    @engine.workflow(name="ask_and_work")
    async def ask_and_work(ctx: durably.AsyncContext) -> list[object]:
        async def side() -> str:
            await ctx.step("one", lambda: "one")
            return str(await ctx.step("two", two))

        got, done = await ctx.gather(ctx.request_approval("ship", {"n": 1}), side())
        return [got.outcome, done]

    try:
        print(json.dumps({"result": engine.run(ask_and_work, run_id=run_id)}))
    except durably.RunParked:
        print(json.dumps({"status": engine.get_run(run_id).status}))


if __name__ == "__main__":
    main()
