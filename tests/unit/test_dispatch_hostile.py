"""``durably.tools.dispatch`` meets arguments a model made up to break it: nesting deeper
than a decoder or an encoder can follow, a number longer than Python parses, a lone
UTF-16 surrogate, more text than an approval request holds. Each becomes a tool-error
message for the model (it can call again); the run goes on, and the tool never runs."""

from __future__ import annotations

import asyncio
import datetime
import json
from pathlib import Path
from typing import Any

import pytest

import durably
from durably.tools import dispatch

RAN: list[str] = []


@durably.tool(kind="read")
def look(q: object) -> str:
    """Look something up."""
    RAN.append("look")
    return "ok"


@durably.tool(kind="destructive")
def wipe(q: str, idempotency_key: str) -> str:
    """Wipe something."""
    RAN.append("wipe")
    return "wiped"


@durably.tool(kind="read")
async def alook(q: object) -> str:
    """Look something up, async."""
    RAN.append("alook")
    return "ok"


def chat(name: str, arguments: str) -> dict[str, Any]:
    call = {"id": "c1", "type": "function", "function": {"name": name, "arguments": arguments}}
    return {"choices": [{"message": {"role": "assistant", "tool_calls": [call]}}]}


HOSTILE = {
    "deeper than the decoder follows": '{"q": ' + "[" * 100_000 + "]" * 100_000 + "}",
    "deeper than the step's encoder follows": '{"q": ' + "[" * 900 + "]" * 900 + "}",
    "more digits than Python parses": '{"q": 1' + "0" * 5000 + "}",
    "a lone surrogate": '{"q": "\\ud800"}',
}


@pytest.mark.parametrize("what", sorted(HOSTILE))
def test_hostile_arguments_become_a_tool_error_not_a_failed_run(tmp_path: Path, what: str) -> None:
    engine = durably.Engine(f"sqlite:///{tmp_path / 'j.db'}")
    response = chat("look", HOSTILE[what])

    @engine.workflow(name="agent")
    def agent(ctx: durably.Context) -> list[dict[str, Any]]:
        return dispatch(ctx, response, [look])  # type: ignore[return-value]

    RAN.clear()
    try:
        (message,) = engine.run("agent", run_id="r1")
        assert message["tool_call_id"] == "c1"
        assert message["content"].startswith("error: ")
        assert "call 'look' again" in message["content"] or "'look'" in message["content"]
        assert RAN == []
        assert engine.get_run("r1").status == "completed"
    finally:
        engine.close()


@pytest.mark.parametrize("what", sorted(HOSTILE))
def test_hostile_arguments_become_a_tool_error_in_an_async_workflow(
    tmp_path: Path, what: str
) -> None:
    engine = durably.Engine(f"sqlite:///{tmp_path / 'j.db'}")
    response = chat("alook", HOSTILE[what])

    @engine.workflow(name="agent")
    async def agent(ctx: durably.AsyncContext) -> Any:
        return await dispatch(ctx, response, [alook])  # type: ignore[misc]

    RAN.clear()
    try:
        (message,) = asyncio.run(engine.run_async("agent", run_id="r1"))
        assert message["content"].startswith("error: ")
        assert RAN == []
    finally:
        engine.close()


def test_arguments_too_large_for_an_approval_become_a_tool_error(tmp_path: Path) -> None:
    engine = durably.Engine(f"sqlite:///{tmp_path / 'j.db'}", park_wait_s=0)
    response = chat("wipe", json.dumps({"q": "x" * 100_000}))

    @engine.workflow(name="agent")
    def agent(ctx: durably.Context) -> list[dict[str, Any]]:
        return dispatch(ctx, response, [wipe])  # type: ignore[return-value]

    RAN.clear()
    try:
        (message,) = engine.run("agent", run_id="r1")
        assert message["content"].startswith("error: ")
        assert "bytes" in message["content"]
        assert "x" * 100 not in message["content"]
        assert RAN == []
        assert engine.pending_approvals("r1") == []
    finally:
        engine.close()


@durably.tool(kind="destructive")
def pay(amount: float, idempotency_key: str) -> str:
    """Pay an amount."""
    RAN.append("pay")
    return "paid"


@durably.tool(kind="destructive")
def schedule(day: datetime.date, idempotency_key: str) -> str:
    """Schedule for a day (a type an approval request cannot list: the tool's own bug)."""
    RAN.append("schedule")
    return "scheduled"


def test_a_number_an_approval_cannot_list_is_a_tool_error_for_the_model(tmp_path: Path) -> None:
    engine = durably.Engine(f"sqlite:///{tmp_path / 'j.db'}", park_wait_s=0)
    response = chat("pay", '{"amount": 1e-05}')

    @engine.workflow(name="agent")
    def agent(ctx: durably.Context) -> list[dict[str, Any]]:
        return dispatch(ctx, response, [pay])  # type: ignore[return-value]

    RAN.clear()
    try:
        (message,) = engine.run("agent", run_id="r1")
        assert message["content"].startswith("error: ") and "string" in message["content"]
        assert RAN == [] and engine.pending_approvals("r1") == []
    finally:
        engine.close()


def test_a_tool_whose_own_types_an_approval_cannot_list_still_fails_loudly(
    tmp_path: Path,
) -> None:
    # The model sent plain JSON; the tool's annotation made it a date: the developer's
    # bug, which must not be handed to the model as its mistake.
    engine = durably.Engine(f"sqlite:///{tmp_path / 'j.db'}", park_wait_s=0)
    response = chat("schedule", '{"day": "2030-01-02"}')

    @engine.workflow(name="agent")
    def agent(ctx: durably.Context) -> list[dict[str, Any]]:
        return dispatch(ctx, response, [schedule])  # type: ignore[return-value]

    RAN.clear()
    try:
        with pytest.raises(durably.DurablyError, match="request_approval"):
            engine.run("agent", run_id="r1")
        assert RAN == []
    finally:
        engine.close()
