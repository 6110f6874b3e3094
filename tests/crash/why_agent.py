"""The agent of the ``durably runs why`` orphan test: ``python why_agent.py URL RUN_ID
LEASE_S`` records a plan, then SIGKILLs itself inside ``charge``, an effect with neither
an idempotency key nor a reconcile: the charge may or may not have reached the world."""

from __future__ import annotations

import os
import signal
import sys

import durably


def _die(run_id: str, position: str, name: str, window: str) -> None:
    if (name, window) == ("charge", "effect"):
        os.kill(os.getpid(), signal.SIGKILL)


def register(engine: durably.Engine) -> durably.Workflow:
    """Register ``pay`` (the same workflow in the killed process and in the test)."""

    @durably.step(effect=True)
    def charge(amount: int) -> str:
        return f"charged {amount}"

    @engine.workflow(name="pay")
    def pay(ctx: durably.Context, amount: int) -> str:
        ctx.step("plan", lambda: "p")
        return ctx.step("charge", charge, amount)

    return pay


if __name__ == "__main__":
    url, run_id, lease_s = sys.argv[1], sys.argv[2], float(sys.argv[3])
    engine = durably.Engine(url, lease_s=lease_s, fault_hook=_die)
    engine.run(register(engine), 5, run_id=run_id)
