"""``durably.current_step()`` and ``durably.current_context()``: where the code running now
is, for integrations that cannot take an ``idempotency_key`` parameter or must know
whether they run in a workflow's body."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import durably
import durably.core


@pytest.fixture
def engine(journal_url: str) -> Iterator[durably.Engine]:
    e = durably.Engine(journal_url)
    yield e
    e.close()


@pytest.fixture
def sqlite_engine(tmp_path: Path) -> Iterator[durably.Engine]:
    e = durably.Engine(f"sqlite:///{tmp_path / 'j.db'}")
    yield e
    e.close()


def _seen(idempotency_key: str) -> dict[str, Any]:
    """A step function's view: what current_step/current_context say, and its key."""
    info = durably.current_step()
    assert info is not None
    return {
        "info": dataclasses.asdict(info),
        "key": idempotency_key,
        "ctx": durably.current_context(),
        "thread": threading.current_thread().name,
    }


def test_sync_step_and_workflow_body(engine: durably.Engine) -> None:
    seen: dict[str, Any] = {}

    def tool(x: int, idempotency_key: str) -> int:
        seen["step"] = _seen(idempotency_key)
        return x + 1

    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> int:
        seen["body"] = (durably.current_context(), durably.current_step())
        seen["ctx"] = ctx
        ctx.now()
        out = ctx.step("tool", tool, 1)
        seen["after"] = (durably.current_context(), durably.current_step())
        return out

    assert durably.current_step() is None and durably.current_context() is None
    assert engine.run(wf, run_id="r1") == 2
    assert durably.current_step() is None and durably.current_context() is None
    assert seen["body"] == (seen["ctx"], None)
    assert seen["after"] == (seen["ctx"], None)
    step = seen["step"]
    assert step["ctx"] is None  # inside a step: a wrapper passes straight through
    assert step["info"]["run_id"] == "r1"
    assert step["info"]["position"] == "1"
    assert step["info"]["idempotency_key"] == step["key"]
    assert step["key"].startswith("r1:") and step["key"].endswith(":1")
    assert step["info"]["attempt"] == 1
    assert step["info"]["fencing_token"] == engine.get_run("r1").fencing_token
    assert isinstance(durably.StepInfo(**step["info"]), durably.StepInfo)


def test_step_info_is_frozen() -> None:
    info = durably.StepInfo("r", "0", "r:i:0", 1, 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.attempt = 2  # type: ignore[misc]


def test_async_step_sync_step_and_gather_branch(engine: durably.Engine) -> None:
    seen: dict[str, Any] = {}

    async def astep(idempotency_key: str) -> str:
        await asyncio.sleep(0)
        seen["async"] = _seen(idempotency_key)
        return "a"

    def sstep(label: str, idempotency_key: str) -> str:
        seen[label] = _seen(idempotency_key)
        return label

    async def branch(ctx: durably.AsyncContext, label: str) -> str:
        seen[f"body:{label}"] = (durably.current_context(), durably.current_step())
        return await ctx.step("s", sstep, label)

    @engine.workflow(name="awf")
    async def awf(ctx: durably.AsyncContext) -> list[Any]:
        seen["ctx"] = ctx
        seen["body"] = (durably.current_context(), durably.current_step())
        await ctx.step("astep", astep)  # 0
        await ctx.step("sstep", sstep, "sync")  # 1
        await ctx.now()  # 2
        await ctx.random()  # 3
        return await ctx.gather(branch(ctx, "b0"), branch(ctx, "b1"))  # 4

    assert engine.run(awf, run_id="ra") == ["b0", "b1"]
    ctx = seen["ctx"]
    assert isinstance(ctx, durably.AsyncContext)
    assert seen["body"] == (ctx, None)
    assert seen["body:b0"] == (ctx, None) and seen["body:b1"] == (ctx, None)
    assert seen["async"]["info"]["position"] == "0"
    assert seen["async"]["ctx"] is None
    sync = seen["sync"]
    # A sync step of an async workflow runs in a step thread: the value reaches it.
    assert sync["thread"].startswith("durably-step")
    assert sync["ctx"] is None
    assert sync["info"]["position"] == "1"
    for label, i in (("b0", 0), ("b1", 1)):
        got = seen[label]
        assert got["info"]["position"] == f"4.{i}.0"
        assert got["info"]["idempotency_key"] == got["key"]
        assert got["key"].endswith(f":4.{i}.0")
        assert got["ctx"] is None
    assert durably.current_step() is None and durably.current_context() is None


def test_retried_step_counts_attempts_with_one_key(engine: durably.Engine) -> None:
    infos: list[durably.StepInfo] = []

    @durably.step(retries=3, backoff=0.0)
    def flaky(idempotency_key: str) -> str:
        info = durably.current_step()
        assert info is not None and info.idempotency_key == idempotency_key
        infos.append(info)
        if len(infos) < 3:
            raise ConnectionError("try again")
        return "ok"

    @engine.workflow(name="retry")
    def wf(ctx: durably.Context) -> str:
        return ctx.step("flaky", flaky)

    assert engine.run(wf, run_id="rr") == "ok"
    assert [i.attempt for i in infos] == [1, 2, 3]
    assert len({i.idempotency_key for i in infos}) == 1
    assert len({i.fencing_token for i in infos}) == 1
    assert engine.history("rr")[0].attempts == 3  # the record says the same


def test_async_retries_and_timeout_thread(sqlite_engine: durably.Engine) -> None:
    """Each attempt of a sync step with a timeout (a helper thread in a sync workflow, a
    step thread in an async one) sees its own attempt number."""
    engine = sqlite_engine
    attempts: list[tuple[str, int]] = []

    @durably.step(retries=1, backoff=0.0, timeout_s=30)
    def once_flaky(where: str) -> str:
        info = durably.current_step()
        assert info is not None and durably.current_context() is None
        attempts.append((where, info.attempt))
        if info.attempt == 1:
            raise ConnectionError("first attempt fails")
        return where

    @engine.workflow(name="sync_timeout")
    def swf(ctx: durably.Context) -> str:
        return ctx.step("s", once_flaky, "sync")

    @engine.workflow(name="async_timeout")
    async def awf(ctx: durably.AsyncContext) -> str:
        return await ctx.step("s", once_flaky, "async")

    assert engine.run(swf, run_id="s") == "sync"
    assert engine.run(awf, run_id="a") == "async"
    assert attempts == [("sync", 1), ("sync", 2), ("async", 1), ("async", 2)]


def test_reconcile_sees_the_step(sqlite_engine: durably.Engine) -> None:
    """A step's reconcile function, asked after a crash in its effect window, runs as
    part of that step: it sees the step's key and no workflow context."""
    engine = sqlite_engine
    seen: list[Any] = []

    def reconcile(key: str) -> Any:
        seen.append((durably.current_step(), durably.current_context(), key))
        return "found"

    @durably.step(reconcile=reconcile)
    def pay() -> str:
        return "paid"

    @engine.workflow(name="pay")
    def wf(ctx: durably.Context) -> str:
        return ctx.step("pay", pay)

    class Crash(BaseException):
        pass

    def hook(run_id: str, pos: str, name: str, window: str) -> None:
        if window == "effect":
            raise Crash

    engine.fault_hook = hook
    with pytest.raises(Crash):
        engine.run(wf, run_id="p")
    engine.fault_hook = None
    assert engine.run(wf, run_id="p") == "found"
    ((info, ctx, key),) = seen
    assert ctx is None and info is not None
    assert info.idempotency_key == key and info.position == "0" and info.attempt == 1


def test_nested_run_inside_a_step(sqlite_engine: durably.Engine) -> None:
    """A workflow run from inside another's step has a body of its own: its context is
    current there, and the outer step's info is back once it returns."""
    engine = sqlite_engine
    seen: dict[str, Any] = {}

    @engine.workflow(name="inner")
    def inner(ctx: durably.Context) -> str:
        seen["inner"] = (durably.current_context() is ctx, durably.current_step())
        return "in"

    def outer_step() -> str:
        before = durably.current_step()
        out = engine.run(inner, run_id="inner-1")
        seen["outer"] = (before, durably.current_step(), durably.current_context())
        return out

    @engine.workflow(name="outer")
    def outer(ctx: durably.Context) -> str:
        return ctx.step("outer_step", outer_step)

    assert engine.run(outer, run_id="outer-1") == "in"
    assert seen["inner"] == (True, None)
    before, after, ctx = seen["outer"]
    assert before is not None and before.run_id == "outer-1" and after == before
    assert ctx is None


def test_fault_step_info_keeps_its_old_name() -> None:
    assert durably.core.StepInfo is durably.FaultStepInfo
    assert durably.FaultStepInfo is not durably.StepInfo
    assert durably.core.fault_step() is None
    assert {"StepInfo", "FaultStepInfo", "current_step", "current_context"} <= set(durably.__all__)


_SCRIPT = """
import json, os, signal, sqlite3, sys
import durably

journal, world = sys.argv[1], sys.argv[2]
engine = durably.Engine(journal)

def tool(x, idempotency_key):
    info = durably.current_step()
    with sqlite3.connect(world) as w:
        w.execute("CREATE TABLE IF NOT EXISTS seen (info TEXT, key TEXT)")
        w.execute(
            "INSERT INTO seen VALUES (?, ?)",
            (json.dumps([info.run_id, info.position, info.idempotency_key, info.attempt,
                         info.fencing_token]), idempotency_key),
        )
        n = w.execute("SELECT count(*) FROM seen").fetchone()[0]
    if n == 1:
        os.kill(os.getpid(), signal.SIGKILL)  # the first execution dies mid-step
    return x * 2

@engine.workflow(name="killed")
def wf(ctx):
    return ctx.step("tool", tool, 21)

print(json.dumps(engine.run(wf, run_id="k1")))
"""


def test_reexecution_after_sigkill_has_a_higher_fencing_token(tmp_path: Path) -> None:
    script = tmp_path / "agent.py"
    script.write_text(textwrap.dedent(_SCRIPT))
    world = tmp_path / "world.db"
    args = [sys.executable, str(script), f"sqlite:///{tmp_path / 'j.db'}", str(world)]
    first = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert first.returncode == -signal.SIGKILL, first.stderr
    second = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout) == 42
    with sqlite3.connect(world) as w:
        rows = [(json.loads(i), k) for i, k in w.execute("SELECT info, key FROM seen")]
    assert len(rows) == 2
    (run1, pos1, key1, att1, tok1), k1 = rows[0]
    (run2, pos2, key2, att2, tok2), k2 = rows[1]
    assert (run1, pos1) == (run2, pos2) == ("k1", "0")
    assert key1 == key2 == k1 == k2  # the same key on the re-execution
    assert tok2 > tok1  # told apart by the fencing token
    assert att1 == att2 == 1  # nothing was written to count the crashed execution


@pytest.mark.parametrize("use_async", [False, True])
def test_replay_check_sees_the_workflow_context(
    sqlite_engine: durably.Engine, use_async: bool
) -> None:
    """Under ``replay --check`` a wrapper in a workflow's body finds the context, so it
    replays its step rather than calling the model live (which the check never may)."""
    from durably.replaycheck import check_runs

    engine = sqlite_engine
    calls: list[str] = []

    def model(prompt: str) -> str:
        calls.append(prompt)
        return prompt.upper()

    def wrapped(prompt: str) -> Any:
        ctx = durably.current_context()
        if ctx is None:
            return model(prompt)
        return ctx.step("model", model, prompt)

    if use_async:

        @engine.workflow(name="wrapped")
        async def wf_async(ctx: durably.AsyncContext) -> str:
            out: str = await wrapped("hi")
            return out

        wf: Any = wf_async
    else:

        @engine.workflow(name="wrapped")
        def wf_sync(ctx: durably.Context) -> str:
            out: str = wrapped("hi")
            return out

        wf = wf_sync

    assert engine.run(wf, run_id="w") == "HI"
    assert calls == ["hi"]
    report = check_runs(engine, [engine.get_run("w")])
    assert report.checked == 1 and report.findings == []
    assert calls == ["hi"]  # replayed, never called again
