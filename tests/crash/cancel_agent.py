"""A run cancelled from another process: ``cancel_agent.py URL RUN_ID FOLDER MODE``.

Runs ``engine.run`` on workflow ``agent`` (MODE ``plain``: step a, then b; ``catch``: the
workflow catches ``Cancelled`` and tries another step; ``sleep``: step a, then a one-hour
``ctx.sleep``, then b). Step a writes FOLDER/inside and waits until the test creates
FOLDER/release (unless MODE is ``sleep``). Every step that runs leaves FOLDER/<name>-ran.
Whatever ``engine.run`` raised or returned goes to FOLDER/outcome.json.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import durably


def main() -> None:
    url, run_id, folder, mode = sys.argv[1], sys.argv[2], Path(sys.argv[3]), sys.argv[4]

    def mark(name: str) -> str:
        (folder / f"{name}-ran").write_text("1")
        return name

    def a() -> str:
        mark("a")
        (folder / "inside").write_text("1")
        if mode != "sleep":
            deadline = time.monotonic() + 60
            while not (folder / "release").exists():
                if time.monotonic() > deadline:
                    raise TimeoutError("the test never released step a")
                time.sleep(0.01)
        return "a"

    engine = durably.Engine(url)

    @engine.workflow(name="agent")
    def agent(ctx: durably.Context) -> str:
        ctx.step("a", a)
        if mode == "sleep":
            (folder / "sleeping").write_text("1")
            ctx.sleep(3600)
        if mode != "catch":
            return ctx.step("b", mark, "b")
        try:
            return ctx.step("b", mark, "b")
        except durably.Cancelled as exc:
            (folder / "caught").write_text(str(exc.reason))
            try:
                ctx.step("c", mark, "c")
            except durably.Cancelled:
                (folder / "stopped-again").write_text("1")
            return "pretends it finished"

    try:
        value = engine.run(agent, run_id=run_id)
        outcome = {"returned": value}
    except durably.Cancelled as exc:
        outcome = {"raised": type(exc).__name__, "reason": exc.reason, "message": str(exc)}
    except durably.DurablyError as exc:
        outcome = {"raised": type(exc).__name__, "message": str(exc)}
    (folder / "outcome.json").write_text(json.dumps(outcome))
    engine.close()


if __name__ == "__main__":
    main()
