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


def _call_api(api_key: str) -> str:
    return "ok"


@pytest.mark.parametrize(
    "mistake",
    ["step-name", "stream-name", "approval-action", "on-timeout", "emit-kind", "patched-id"],
)
def test_a_value_passed_where_a_name_belongs_is_named_by_type_never_quoted(
    tmp_path: Path, mistake: str
) -> None:
    # ctx.step(partial(call, api_key=KEY)) forgets the step's name: the partial is the
    # name, and its repr lists the key bound into it. Once, each of these refusals
    # quoted the value with !r into the blocked run's reason and its events.
    import functools

    bound = functools.partial(_call_api, api_key=SECRET)
    args = {"card": SECRET}
    db = tmp_path / "j.db"
    with durably.Engine(f"sqlite:///{db}") as engine:

        @engine.workflow(name="wf")
        def wf(ctx: durably.Context) -> Any:
            if mistake == "step-name":
                return ctx.step(bound, _call_api)  # type: ignore[arg-type]
            if mistake == "stream-name":
                return list(ctx.step_stream(bound, lambda: iter([1])))  # type: ignore[arg-type]
            if mistake == "approval-action":
                return ctx.request_approval(args, "refund")  # type: ignore[arg-type]
            if mistake == "on-timeout":
                return ctx.request_approval("refund", {}, on_timeout=args)  # type: ignore[arg-type]
            if mistake == "emit-kind":
                return ctx.emit(args, {})  # type: ignore[arg-type]
            return ctx.patched(bound)  # type: ignore[arg-type]

        with pytest.raises((durably.ConfigError, durably.WorkflowFailed)) as err:
            engine.run("wf", run_id="r1")
        run = engine.get_run("r1")
    assert run.status in ("blocked", "failed")
    assert SECRET not in f"{err.value}\n{run.park_reason}\n{run.error_message}", err.value
    with sqlite3.connect(db) as conn:
        rows = repr(conn.execute("SELECT * FROM events").fetchall())
        rows += repr(conn.execute("SELECT * FROM runs").fetchall())
    assert SECRET not in rows


def test_the_untyped_result_warning_names_a_partial_without_its_bound_values(
    tmp_path: Path,
) -> None:
    # The warning for a step returning a pydantic model without a return annotation
    # named the function by repr when it had no __qualname__: a partial's repr, with the
    # API key bound into it, went to stderr and the logs.
    import functools
    import warnings

    import pydantic

    class Reply(pydantic.BaseModel):
        text: str

    def ask(api_key: str, prompt: str):  # type: ignore[no-untyped-def]  # no annotation
        return Reply(text=prompt)

    with durably.Engine(f"sqlite:///{tmp_path / 'j.db'}") as engine:

        @engine.workflow(name="wf")
        def wf(ctx: durably.Context) -> Any:
            return ctx.step("ask-untyped-partial", functools.partial(ask, SECRET), "hi")

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            engine.run("wf", run_id="r1")
    [warning] = [w for w in caught if "no return annotation" in str(w.message)]
    text = str(warning.message)
    assert "functools.partial(" in text and "ask" in text
    assert SECRET not in text, text
