"""A ``@durably.tool`` that asks a person first (``destructive``, or ``approval=True``)
passed to ``ctx.step_stream`` never runs without the approval: a streamed step records
the call alone, so it is refused before anything runs (the run ends ``blocked``, as in
``saga.step``), in sync and async workflows; a tool without an approval streams."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

import durably

RAN: list[str] = []


@durably.tool(kind="destructive")
def deploy(target: str, idempotency_key: str) -> Iterator[str]:
    """Deploy, streaming the log."""
    RAN.append(target)
    yield f"deploying {target}"


@durably.tool(kind="read", approval=True)
async def adeploy(target: str) -> AsyncIterator[str]:
    """Deploy, async, streaming the log."""
    RAN.append(target)
    yield f"deploying {target}"


@durably.tool(kind="read")
def tail(target: str) -> Iterator[str]:
    """Read a log."""
    yield f"log of {target}"


def test_a_destructive_tool_is_refused_by_step_stream_and_never_runs(tmp_path: Path) -> None:
    engine = durably.Engine(f"sqlite:///{tmp_path / 'j.db'}", park_wait_s=0)

    @engine.workflow(name="ship")
    def ship(ctx: durably.Context) -> list[str]:
        return list(ctx.step_stream("deploy", deploy, "prod"))

    @engine.workflow(name="read")
    def read(ctx: durably.Context) -> list[str]:
        return list(ctx.step_stream("tail", tail, "prod"))

    RAN.clear()
    try:
        with pytest.raises(durably.DurablyError, match="approval"):
            engine.run("ship", run_id="r1")
        assert RAN == []
        assert engine.get_run("r1").status == "blocked"
        assert engine.pending_approvals("r1") == []
        assert engine.run("read", run_id="r2") == ["log of prod"]
    finally:
        engine.close()


def test_an_async_tool_asking_approval_is_refused_by_step_stream(tmp_path: Path) -> None:
    engine = durably.Engine(f"sqlite:///{tmp_path / 'j.db'}", park_wait_s=0)

    @engine.workflow(name="ship")
    async def ship(ctx: durably.AsyncContext) -> list[str]:
        return [c async for c in ctx.step_stream("deploy", adeploy, "prod")]

    RAN.clear()
    try:
        with pytest.raises(durably.DurablyError, match="approval"):
            asyncio.run(engine.run_async("ship", run_id="r1"))
        assert RAN == []
        assert engine.get_run("r1").status == "blocked"
    finally:
        engine.close()
