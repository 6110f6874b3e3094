"""A value passed to ``ctx.gather`` where a branch belongs is named by its type, never
quoted: the refusal is the failed run's error, its ``run.failed`` event, its span
status and the exception's text, which leave the process (as ``durably.steps.fn_text``
names a step's function). Once, the message ended ``got {'Authorization': 'Bearer
sk-live-...'}``: the value's repr."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import durably

SECRET = "sk-live-PLANTED-789"


def _fetch() -> str:
    return "ok"


def test_a_value_passed_to_gather_as_a_branch_is_named_by_type_never_quoted(
    tmp_path: Path,
) -> None:
    db = tmp_path / "j.db"
    headers = {"Authorization": "Bearer " + SECRET}
    with durably.Engine(f"sqlite:///{db}") as engine:

        @engine.workflow(name="wf")
        async def wf(ctx: durably.AsyncContext) -> Any:
            return await ctx.gather(ctx.step("a", _fetch), headers)  # type: ignore[arg-type]

        with pytest.raises(durably.WorkflowFailed) as err:
            asyncio.run(engine.run_async("wf", run_id="r1"))
        run = engine.get_run("r1")
    text = f"{err.value}\n{run.park_reason}\n{run.error_message}"
    assert "ctx.gather takes coroutines" in str(err.value)
    assert "got a dict (builtins.dict)" in str(err.value)
    assert SECRET not in text
    with sqlite3.connect(db) as conn:
        rows = repr(conn.execute("SELECT * FROM events").fetchall())
        rows += repr(conn.execute("SELECT * FROM runs").fetchall())
    assert SECRET not in rows
