"""Code mistakes are refused where they are made: a workflow function that takes no
context at ``@engine.workflow`` (nothing registered), an async step function in a sync
workflow at the step (the run blocks, whatever the workflow catches, and resumes once the
code is fixed: a misuse, never the run's failure)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import durably


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[durably.Engine]:
    with durably.Engine(f"sqlite:///{tmp_path / 'j.db'}", park_wait_s=0) as e:
        yield e


def _no_ctx() -> int:
    return 1


def _kw_only(*, order: int) -> int:
    return order


def _kwargs(**kw: Any) -> int:
    return 1


async def _async_no_ctx() -> int:
    return 1


@pytest.mark.parametrize(
    ("fn", "shown"),
    [
        (_no_ctx, "_no_ctx()"),
        (_kw_only, "_kw_only(*, order)"),
        (_kwargs, "_kwargs(**kw)"),
        (_async_no_ctx, "_async_no_ctx()"),
    ],
)
def test_a_workflow_without_a_context_parameter_is_refused_at_registration(
    engine: durably.Engine, fn: Callable[..., Any], shown: str
) -> None:
    with pytest.raises(durably.ConfigError) as err:
        engine.workflow(name="wf")(fn)
    assert f"workflow 'wf': {shown} takes no context" in str(err.value)
    assert "Write def" in str(err.value) and "nothing was registered" in str(err.value)
    assert engine.workflows() == []


def test_workflows_that_take_their_context_still_register(engine: durably.Engine) -> None:
    def plain(ctx: durably.Context) -> None: ...

    def star(*args: Any) -> None: ...

    async def coro(ctx: durably.AsyncContext, x: int = 1) -> None: ...

    for fn in (plain, star, coro):
        engine.workflow()(fn)
    assert len(engine.workflows()) == 3


async def _fetch(x: int) -> int:
    return x


def test_an_async_step_in_a_sync_workflow_blocks_the_run_then_resumes_when_fixed(
    engine: durably.Engine,
) -> None:
    fn: list[Callable[..., Any]] = [_fetch]
    caught: list[str] = []

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> Any:
        first = ctx.step("first", lambda: 1)
        try:
            return first + ctx.step("fetch", fn[0], 1)
        except Exception as exc:  # the workflow cannot turn the misuse into a result
            caught.append(type(exc).__name__)
            return "caught"

    with pytest.raises(durably.ConfigError, match=r"_fetch is an async function"):
        engine.run(w, run_id="r")
    run = engine.get_run("r")
    assert run.status == "blocked" and caught == ["ConfigError"]
    assert "Make the workflow async" in (run.park_reason or "")
    assert [s.name for s in engine.history("r")] == ["first"]  # nothing recorded at fetch
    fn[0] = lambda x: x + 1  # the code fixed: the same run resumes and completes
    engine.retry("r")
    assert engine.run(w, run_id="r") == 3


def test_an_async_do_of_a_sync_saga_and_an_async_tool_block_too(engine: durably.Engine) -> None:
    @durably.tool(kind="read")
    async def lookup(x: int) -> int:
        return x

    @engine.workflow(name="saga")
    def saga_wf(ctx: durably.Context) -> Any:
        with ctx.saga() as saga:
            return saga.step("pay", _fetch, lambda x: None, 1)

    @engine.workflow(name="tool")
    def tool_wf(ctx: durably.Context) -> Any:
        return ctx.step("lookup", lookup, 1)

    for wf, run_id in ((saga_wf, "s"), (tool_wf, "t")):
        with pytest.raises(durably.ConfigError, match="is an async function"):
            engine.run(wf, run_id=run_id)
        assert engine.get_run(run_id).status == "blocked", run_id
        assert engine.history(run_id) == []


def test_a_sync_step_function_returning_a_coroutine_blocks_the_run(
    engine: durably.Engine,
) -> None:
    """A lambda around an async call, in a sync workflow: the coroutine is never awaited,
    so nothing it stands for happened. The run blocks (the workflow cannot catch it and go
    on, no failed step is recorded, no retry spends attempts) and resumes once fixed."""
    fn: list[Callable[..., Any]] = [lambda x: _fetch(x)]
    calls: list[int] = []
    caught: list[str] = []

    @durably.step(retries=2, backoff=0.0)
    def fetch(x: int) -> int:
        calls.append(x)
        return fn[0](x)  # type: ignore[no-any-return]

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> Any:
        first = ctx.step("first", lambda: 1)
        try:
            return first + ctx.step("fetch", fetch, 1)
        except Exception as exc:  # the workflow cannot turn the misuse into a result
            caught.append(type(exc).__name__)
            return "caught"

    with pytest.raises(durably.ConfigError, match=r"returned an awaitable \(coroutine\)"):
        engine.run(w, run_id="r")
    run = engine.get_run("r")
    assert run.status == "blocked" and caught == ["ConfigError"], (run.status, caught)
    assert "make the workflow async" in (run.park_reason or "")
    assert calls == [1]  # no retry
    assert [s.name for s in engine.history("r")] == ["first"]  # nothing recorded at fetch
    fn[0] = lambda x: x + 1
    engine.retry("r")
    assert engine.run(w, run_id="r") == 3
