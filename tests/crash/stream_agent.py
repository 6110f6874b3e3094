"""A run for the event-stream crash test: ``stream_agent.py URL RUN_ID RELEASE_FILE``.

Twelve steps, each after an emit; step 5 is an effect that records its intent (so its
``step.started`` commits) and then waits for ``RELEASE_FILE`` to exist: the test kills
this process there, and another one takes the run over.
"""

from __future__ import annotations

import os
import sys
import time

import durably

STEPS = 12
BLOCK_AT = 5
WAIT_S_MAX = 120.0


def main() -> None:
    url, run_id, release = sys.argv[1:4]
    # The default lease: the takeover does not wait for it (the killed owner is provably
    # gone), and a short one could lapse while a loaded machine starved the heartbeat.
    engine = durably.Engine(url)

    @durably.step(effect=True)
    def gated(i: int, idempotency_key: str) -> int:
        deadline = time.monotonic() + WAIT_S_MAX
        while not os.path.exists(release):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{release} never appeared")
            time.sleep(0.02)
        return i

    @engine.workflow()
    def ticking(ctx: durably.Context) -> int:
        total = 0
        for i in range(STEPS):
            ctx.emit("tick", i)
            total += ctx.step(f"s{i}", gated if i == BLOCK_AT else (lambda i=i: i), i)
        return total

    try:
        print(engine.run(ticking, run_id=run_id), flush=True)
    finally:
        engine.close()


if __name__ == "__main__":
    main()
