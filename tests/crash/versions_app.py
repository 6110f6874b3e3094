"""Two versions of one workflow for the versions crash test (``versions_app:engine``).

``VERSIONS`` (e.g. ``1,2``) says which versions this process registers; the journal comes
from ``DURABLY_URL``; every step appends ``<version>:<step>`` to the file ``VERSIONS_WORLD``
(the outside world). ``VERSIONS_KILL=POS`` SIGKILLs the process before the step at POS
runs. ``python versions_app.py RUN_ID`` starts a run of the newest version registered.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from typing import Any

import durably

KILL = os.environ.get("VERSIONS_KILL")


def _hook(run_id: str, position: str, name: str, window: str) -> None:
    if KILL and (position, window) == (KILL, "before"):
        os.kill(os.getpid(), signal.SIGKILL)


def _tool(label: str) -> Callable[[str], str]:
    def tool(item: str) -> str:
        with open(os.environ["VERSIONS_WORLD"], "a") as world:
            world.write(f"{label}:{item}\n")
        return f"{label}:{item}"

    tool.__name__ = label.replace(":", "_")
    return tool


def register(engine: durably.Engine, versions: list[str]) -> dict[str, Any]:
    """Register the asked versions of ``ship``; returns them by version."""
    out: dict[str, Any] = {}
    if "1" in versions:

        @engine.workflow(name="ship", version="1")
        def ship_v1(ctx: durably.Context, item: str) -> list[str]:
            return [
                ctx.step("pack", _tool("v1:pack"), item),
                ctx.step("send", _tool("v1:send"), item),
            ]

        out["1"] = ship_v1
    if "2" in versions:

        @engine.workflow(name="ship", version="2")
        def ship_v2(ctx: durably.Context, item: str) -> list[str]:
            checked = ctx.step("check", _tool("v2:check"), item)
            return [
                checked,
                ctx.step("pack", _tool("v2:pack"), item),
                ctx.step("send", _tool("v2:send"), item),
            ]

        out["2"] = ship_v2
    return out


engine = durably.Engine(fault_hook=_hook if KILL else None, lease_s=30)
flows = register(engine, os.environ.get("VERSIONS", "1,2").split(","))


if __name__ == "__main__":
    newest = flows[max(flows)]
    print(engine.run(newest, "parcel", run_id=sys.argv[1]))
