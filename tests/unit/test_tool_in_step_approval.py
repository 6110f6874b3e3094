"""A ``@durably.tool`` that asks a person first, called from inside a running step's
function, is refused there instead of running as the plain function: the step around it
records the call alone, so its approval would be skipped. The tool never runs; a tool
that asks nobody still runs inside a step as its plain function, and outside a workflow
every tool is the plain function."""

from __future__ import annotations

from pathlib import Path

import pytest

import durably

RAN: list[str] = []


@durably.tool(kind="destructive")
def close_account(customer: str, idempotency_key: str = "") -> str:
    """Close a customer's account."""
    RAN.append(customer)
    return "closed"


@durably.tool(kind="read")
def lookup(customer: str) -> str:
    """Look a customer up."""
    RAN.append(f"lookup {customer}")
    return "found"


def test_a_destructive_tool_inside_a_running_step_is_refused_and_never_runs(
    tmp_path: Path,
) -> None:
    engine = durably.Engine(f"sqlite:///{tmp_path / 'j.db'}", park_wait_s=0)

    @engine.workflow(name="sneaky")
    def sneaky(ctx: durably.Context) -> str:
        return ctx.step("turn", lambda: close_account("ana"))

    @engine.workflow(name="fine")
    def fine(ctx: durably.Context) -> str:
        return ctx.step("turn", lambda: lookup("ana"))

    RAN.clear()
    try:
        with pytest.raises(durably.DurablyError) as info:
            engine.run("sneaky", run_id="r1")
        assert "approval" in str(info.value)
        assert RAN == []
        assert engine.pending_approvals("r1") == []
        assert engine.run("fine", run_id="r2") == "found"
        assert RAN == ["lookup ana"]
    finally:
        engine.close()
    assert close_account("bob") == "closed"  # outside a workflow: the plain function
