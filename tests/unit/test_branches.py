"""``ctx.branches``: positions for calls that framework code runs concurrently itself
(asyncio tasks outside ``ctx.gather``, a thread pool as LangChain's sync agents use),
fixed by the order the calls were listed, never by completion or thread timing.

Real SQLite journals (and PostgreSQL where a store is involved: ``journal_url``). A real
SIGKILL between two branches' steps: tests/crash/test_branches_crash.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

import durably
from durably import codec
from durably.history import BLOCKED, GATHER, idempotency_key


@pytest.fixture
def engine(journal_url: str) -> Iterator[durably.Engine]:
    with durably.Engine(journal_url, park_wait_s=0) as e:
        yield e


class Crash(BaseException):
    """Stands in for a process death inside one process (a real one: tests/crash)."""


class Tools:
    """The outside world: keyed tool calls, counted, with a delay per call to choose the
    completion order."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.keys: dict[str, str] = {}
        self.delay: dict[str, float] = {}
        self.crash_after = False
        self.lock = threading.Lock()

    def record(self, name: str, key: str) -> str:
        with self.lock:
            self.calls[name] += 1
            self.keys[name] = key
        return f"{name}@{key.rsplit(':', 1)[-1]}"

    def sync(self, name: str) -> Callable[..., str]:
        def fn(idempotency_key: str) -> str:
            time.sleep(self.delay.get(name, 0))
            return self.record(name, idempotency_key)

        fn.__name__ = fn.__qualname__ = name
        return durably.step(effect=True)(fn)

    def aio(self, name: str) -> Callable[..., Any]:
        async def fn(idempotency_key: str) -> str:
            await asyncio.sleep(self.delay.get(name, 0))
            return self.record(name, idempotency_key)

        fn.__name__ = fn.__qualname__ = name
        return durably.step(effect=True)(fn)

    def after(self) -> str:
        if self.crash_after:
            raise Crash("the process died after the branches")
        return "after"


def layout(engine: durably.Engine, run_id: str) -> list[tuple[str, str, str]]:
    return [(r.position, r.kind, r.name) for r in engine.history(run_id)]


EXPECTED = [
    ("0", "step", "plan"),
    ("1", GATHER, "durably.gather"),
    ("1.0.0", "step", "search"),
    ("1.0.1", "step", "search_more"),
    ("1.1.0", "step", "fetch"),
    ("1.1.1", "step", "fetch_more"),
    ("2", "step", "after"),
]


def async_agent(engine: durably.Engine, tools: Tools, labels: list[str] | None = None) -> Any:
    """A framework's loop in miniature: the model listed two tool calls; each runs in an
    asyncio task of its own (outside ctx.gather), two steps each."""

    @engine.workflow(name="agent")
    async def agent(ctx: durably.AsyncContext) -> list[str]:
        await ctx.step("plan", lambda: "plan")
        group = ctx.branches(list(labels or ["search", "fetch"]))

        async def call(i: int, name: str) -> str:
            with group.branch(i):
                first = await ctx.step(name, tools.aio(name))
                more = await ctx.step(f"{name}_more", tools.aio(f"{name}_more"))
                return f"{first}+{more}"

        tasks = [asyncio.create_task(call(i, n)) for i, n in enumerate(["search", "fetch"])]
        out = [await t for t in tasks]
        await ctx.step("after", tools.after)
        return out

    return agent


def thread_agent(engine: durably.Engine, tools: Tools, labels: list[str] | None = None) -> Any:
    """LangChain's sync agents in miniature: tool calls in a ThreadPoolExecutor, each
    submitted with a copy of the caller's contextvars."""

    @engine.workflow(name="agent")
    def agent(ctx: durably.Context) -> list[str]:
        ctx.step("plan", lambda: "plan")
        group = ctx.branches(list(labels or ["search", "fetch"]))

        def call(i: int, name: str) -> str:
            with group.branch(i):
                first = ctx.step(name, tools.sync(name))
                more = ctx.step(f"{name}_more", tools.sync(f"{name}_more"))
                return f"{first}+{more}"

        with ThreadPoolExecutor(max_workers=2) as pool:
            futures = [
                pool.submit(contextvars.copy_context().run, call, i, n)
                for i, n in enumerate(["search", "fetch"])
            ]
            out = [f.result() for f in futures]
        ctx.step("after", tools.after)
        return out

    return agent


AGENTS = {"asyncio": async_agent, "threads": thread_agent}


@pytest.mark.parametrize("how", ["asyncio", "threads"])
def test_positions_follow_the_listed_order_not_completion(engine: durably.Engine, how: str) -> None:
    tools = Tools()
    tools.delay = {"search": 0.05, "search_more": 0.05}  # the first listed finishes last
    out = engine.run(AGENTS[how](engine, tools), run_id="r")
    assert out == ["search@1.0.0+search_more@1.0.1", "fetch@1.1.0+fetch_more@1.1.1"]
    assert layout(engine, "r") == EXPECTED
    incarnation = engine.get_run("r").incarnation
    assert tools.keys["fetch_more"] == idempotency_key("r", incarnation, "1.1.1")
    (marker,) = [r for r in engine.history("r") if r.kind == GATHER]
    shape = [2, ["search", "fetch"]]
    assert marker.digest == codec.digest("durably.gather", shape, {})  # ctx.gather's record


@pytest.mark.parametrize("how", ["asyncio", "threads"])
def test_a_replay_in_another_completion_order_gives_the_same_records(
    engine: durably.Engine, how: str
) -> None:
    tools = Tools()
    tools.delay = {"search": 0.04}
    tools.crash_after = True
    agent = AGENTS[how](engine, tools)
    with pytest.raises(Crash):
        engine.run(agent, run_id="r")
    before = engine.history("r")
    tools.delay = {"fetch": 0.04, "fetch_more": 0.02}  # now the other one finishes last
    tools.crash_after = False
    assert engine.run(agent, run_id="r")[1] == "fetch@1.1.0+fetch_more@1.1.1"
    once = ["search", "search_more", "fetch", "fetch_more"]
    assert tools.calls == Counter(dict.fromkeys(once, 1))
    assert layout(engine, "r") == EXPECTED
    replayed = {r.position: r for r in engine.history("r")}
    for rec in before:
        assert (replayed[rec.position].digest, replayed[rec.position].output) == (
            rec.digest,
            rec.output,
        )


def test_threads_of_branches_run_their_steps_at_the_same_time(engine: durably.Engine) -> None:
    # Both steps wait for each other: they finish only if neither holds the run's lock
    # while its function runs.
    barrier = threading.Barrier(3, timeout=10)

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> list[int]:
        group = ctx.branches(["a", "b", "c"])

        def call(i: int) -> int:
            with group.branch(i):
                ctx.now()  # a value call from the thread too

                def meet() -> int:
                    barrier.wait()
                    info = durably.current_step()
                    assert info is not None and info.position == f"0.{i}.1"
                    return i

                return ctx.step("meet", meet)

        with ThreadPoolExecutor(max_workers=3) as pool:
            futures = [pool.submit(contextvars.copy_context().run, call, i) for i in (2, 1, 0)]
            return sorted(f.result() for f in futures)

    assert engine.run(w, run_id="r") == [0, 1, 2]
    positions = [r.position for r in engine.history("r")]
    assert positions == ["0", "0.0.0", "0.0.1", "0.1.0", "0.1.1", "0.2.0", "0.2.1"]


@pytest.mark.parametrize("how", ["asyncio", "threads"])
def test_a_changed_label_list_is_nondeterminism_before_any_branch_runs(
    engine: durably.Engine, how: str
) -> None:
    tools = Tools()
    tools.crash_after = True
    labels = ["search", "fetch"]  # the deployed code's list
    agent = AGENTS[how](engine, tools, labels)
    with pytest.raises(Crash):
        engine.run(agent, run_id="r")
    calls = Counter(tools.calls)
    tools.crash_after = False
    labels[1] = "browse"  # a deploy: the framework now lists other calls
    with pytest.raises(durably.NonDeterminism, match=r"2 branches \['search', 'fetch'\]"):
        engine.run(agent, run_id="r")
    assert engine.get_run("r").status == BLOCKED
    assert tools.calls == calls  # no branch ran again


def test_misuse_blocks_the_run_with_a_config_error(engine: durably.Engine) -> None:
    ran: list[str] = []

    @engine.workflow(name="out_of_range")
    async def out_of_range(ctx: durably.AsyncContext) -> None:
        group = ctx.branches(["a", "b"])
        with group.branch(2):
            ran.append("body")

    _run_blocked(engine, out_of_range, "r1", r"branch\(2\) is not a branch of this group of 2")

    @engine.workflow(name="twice")
    def twice(ctx: durably.Context) -> None:
        group = ctx.branches(["a"])
        gate = threading.Event()

        def hold() -> None:
            with group.branch(0):
                gate.wait(10)

        with ThreadPoolExecutor(max_workers=1) as pool:
            held = pool.submit(contextvars.copy_context().run, hold)
            time.sleep(0.02)
            try:
                with group.branch(0):
                    ran.append("body")
            finally:
                gate.set()
                held.result()

    _run_blocked(engine, twice, "r2", r"entered while it is entered already")

    @engine.workflow(name="late")
    async def late(ctx: durably.AsyncContext) -> None:
        group = ctx.branches(["a"])
        await ctx.step("next", lambda: 1)  # the parent moved on: the group is over
        with group.branch(0):
            ran.append("body")

    _run_blocked(engine, late, "r3", r"after its group ended")
    assert ran == []


def _run_blocked(engine: durably.Engine, wf: Any, run_id: str, match: str) -> None:
    with pytest.raises(durably.ConfigError, match=match):
        engine.run(wf, run_id=run_id)
    assert engine.get_run(run_id).status == BLOCKED


def test_the_parent_recording_while_a_branch_is_in_a_step_is_concurrent_use(
    engine: durably.Engine,
) -> None:
    @engine.workflow(name="w")
    async def w(ctx: durably.AsyncContext) -> None:
        group = ctx.branches(["slow"])

        async def slow() -> None:
            with group.branch(0):
                await ctx.step("slow", asyncio.sleep, 0.05)

        task = asyncio.create_task(slow())
        await asyncio.sleep(0.01)
        try:
            await ctx.step("parent", lambda: 1)
        finally:
            await asyncio.gather(task, return_exceptions=True)

    _run_blocked(engine, w, "r", r"branch 0 of the ctx.branches group at 0 is still running")


def test_a_branch_entered_again_continues_its_numbering(engine: durably.Engine) -> None:
    @engine.workflow(name="w")
    async def w(ctx: durably.AsyncContext) -> int:
        group = ctx.branches(["a", "b"])
        with group.branch(1):
            await ctx.step("b1", lambda: 1)
        with group.branch(0):
            await ctx.step("a1", lambda: 1)
        with group.branch(1):
            await ctx.step("b2", lambda: 1)
        return 0

    engine.run(w, run_id="r")
    assert [(p, n) for p, _, n in layout(engine, "r")] == [
        ("0", "durably.gather"),
        ("0.0.0", "a1"),
        ("0.1.0", "b1"),
        ("0.1.1", "b2"),
    ]


@pytest.mark.parametrize("how", ["asyncio", "threads"])
def test_a_branch_that_parks_on_an_approval_parks_the_run_and_resumes_by_replay(
    engine: durably.Engine, how: str
) -> None:
    tools = Tools()
    tools.delay = {"fetch": 0.05}  # in flight while the other branch parks

    def body_sync(ctx: durably.Context, group: durably.Branches, i: int) -> str:
        with group.branch(i):
            if i == 0:
                time.sleep(0.01)  # the sibling's step is in flight when this parks
                d = ctx.request_approval("refund", {"n": 1})
                return f"{d.outcome}:{ctx.step('refund', tools.sync('refund'))}"
            return str(ctx.step("fetch", tools.sync("fetch")))

    async def body_async(ctx: durably.AsyncContext, group: durably.Branches, i: int) -> str:
        with group.branch(i):
            if i == 0:
                await asyncio.sleep(0.01)  # the sibling's step is in flight when this parks
                d = await ctx.request_approval("refund", {"n": 1})
                return f"{d.outcome}:{await ctx.step('refund', tools.aio('refund'))}"
            return str(await ctx.step("fetch", tools.aio("fetch")))

    if how == "threads":

        @engine.workflow(name="w")
        def w(ctx: durably.Context) -> list[str]:
            group = ctx.branches(["refund", "fetch"])
            with ThreadPoolExecutor(max_workers=2) as pool:
                futures = [
                    pool.submit(contextvars.copy_context().run, body_sync, ctx, group, i)
                    for i in range(2)
                ]
                return [f.result() for f in futures]

    else:

        @engine.workflow(name="w")
        async def w(ctx: durably.AsyncContext) -> list[str]:
            group = ctx.branches(["refund", "fetch"])
            tasks = [asyncio.create_task(body_async(ctx, group, i)) for i in range(2)]
            done = await asyncio.gather(*tasks, return_exceptions=True)
            for r in done:
                if isinstance(r, BaseException):
                    raise r  # the park goes on through the framework's code
            return [str(r) for r in done]

    with pytest.raises(durably.RunParked):
        engine.run(w, run_id="r")
    assert engine.get_run("r").status == "parked"
    assert tools.calls == Counter({"fetch": 1})  # the sibling's step in flight was recorded
    [req] = engine.pending_approvals("r")
    assert req.request_id == "0.0.0"
    engine.approve("r", "0.0.0", digest=req.digest, by="ana")
    assert engine.run(w, run_id="r") == ["approved:refund@0.0.1", "fetch@0.1.0"]
    assert tools.calls == Counter({"fetch": 1, "refund": 1})


def test_an_async_group_refuses_entry_from_another_thread(engine: durably.Engine) -> None:
    @engine.workflow(name="w")
    async def w(ctx: durably.AsyncContext) -> None:
        group = ctx.branches(["a"])

        def enter() -> None:
            with group.branch(0):
                pass

        await asyncio.get_running_loop().run_in_executor(None, enter)

    _run_blocked(engine, w, "r", r"another thread than the async workflow's event loop")


def test_bad_labels_block_the_run(engine: durably.Engine) -> None:
    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> None:
        ctx.branches("search")  # type: ignore[arg-type]

    _run_blocked(engine, w, "r", r"labels must be a list of str")


def test_many_threads_recording_at_once_lose_no_record(engine: durably.Engine) -> None:
    # Threads switch every microsecond here, so unlocked kernel state (buffered records
    # and events taken by one thread while another adds to them) would lose some.
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    n, k = 8, 6

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> int:
        group = ctx.branches([f"call{i}" for i in range(n)])

        def call(i: int) -> int:
            with group.branch(i):
                for j in range(k):
                    ctx.emit("progress", {"i": i, "j": j})
                    ctx.random()
                    ctx.step("s", lambda j=j: j)
            return i

        with ThreadPoolExecutor(max_workers=n) as pool:
            futures = [pool.submit(contextvars.copy_context().run, call, i) for i in range(n)]
            return sum(f.result() for f in futures)

    try:
        assert engine.run(w, run_id="r") == sum(range(n))
    finally:
        sys.setswitchinterval(old)
    want = {"0"} | {f"0.{i}.{j}" for i in range(n) for j in range(2 * k)}
    assert {r.position for r in engine.history("r")} == want
    emitted = [e for e in engine.events("r", limit=1000).events if e.kind == "user"]
    assert len(emitted) == n * k


@pytest.mark.parametrize("how", ["asyncio", "threads"])
def test_replay_check_replays_a_run_with_branches_and_finds_a_changed_list(
    engine: durably.Engine, how: str
) -> None:
    from durably.replaycheck import check_run

    tools = Tools()
    labels = ["search", "fetch"]
    agent = AGENTS[how](engine, tools, labels)
    engine.run(agent, run_id="r")
    assert check_run(engine, engine.get_run("r")) is None  # replays to the end unchanged
    labels.reverse()
    finding = check_run(engine, engine.get_run("r"))
    assert finding is not None and "2 branches ['search', 'fetch']" in str(finding)
    assert tools.calls["search"] == 1  # the check never runs a step


def test_a_failed_branch_cancelling_its_siblings_replays_in_any_cancel_timing(
    engine: durably.Engine,
) -> None:
    # Live, the sibling's first step is recorded before the framework cancels it; on
    # replay the failure comes back at once and the sibling may be cancelled before it
    # asks for that position again: no sign of changed code (as under a failed gather).
    tools = Tools()
    tools.delay = {"fetch_more": 5}
    tools.crash_after = True

    async def bad() -> str:
        await asyncio.sleep(0.1)  # live only: a replay raises the recorded failure at once
        raise ValueError("the tool failed")

    @engine.workflow(name="w")
    async def w(ctx: durably.AsyncContext) -> str:
        group = ctx.branches(["bad", "fetch"])

        async def failing() -> None:
            with group.branch(0):
                await ctx.step("bad", bad)

        async def fetching() -> None:
            with group.branch(1):
                await asyncio.sleep(0.02)  # the framework's own work before the call
                await ctx.step("fetch", tools.aio("fetch"))
                await ctx.step("fetch_more", tools.aio("fetch_more"))

        tasks = [asyncio.create_task(failing()), asyncio.create_task(fetching())]
        try:
            await asyncio.gather(*tasks)
        except durably.StepFailed:
            for t in tasks:  # the framework gives up on the turn's other calls
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        return str(await ctx.step("after", tools.after))

    with pytest.raises(Crash):
        engine.run(w, run_id="r")
    assert {r.position for r in engine.history("r")} >= {"0", "0.0.0", "0.1.0"}
    tools.crash_after = False
    assert engine.run(w, run_id="r") == "after"
    assert tools.calls == Counter({"fetch": 1})


def test_streamed_steps_in_thread_branches_record_in_their_branches(
    engine: durably.Engine,
) -> None:
    # Each stream waits for the other between its chunks: they finish only if the run's
    # lock is let go while a chunk is pulled.
    barrier = threading.Barrier(2, timeout=10)

    def chunks(name: str) -> Iterator[str]:
        for k in range(3):
            if k:
                barrier.wait()
            yield f"{name}{k}"

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> list[list[str]]:
        group = ctx.branches(["a", "b"])

        def call(i: int, name: str) -> list[str]:
            with group.branch(i):
                got = list(ctx.step_stream(name, chunks, name))
                ctx.step(f"{name}_done", lambda: 1)
                return got

        with ThreadPoolExecutor(max_workers=2) as pool:
            futures = [
                pool.submit(contextvars.copy_context().run, call, i, n)
                for i, n in enumerate(["a", "b"])
            ]
            return [f.result() for f in futures]

    want = [["a0", "a1", "a2"], ["b0", "b1", "b2"]]
    assert engine.run(w, run_id="r") == want
    assert [(p, n) for p, _, n in layout(engine, "r")] == [
        ("0", "durably.gather"),
        ("0.0.0", "a"),
        ("0.0.1", "a_done"),
        ("0.1.0", "b"),
        ("0.1.1", "b_done"),
    ]


def test_returning_while_a_branch_is_still_entered_blocks_the_run(
    engine: durably.Engine,
) -> None:
    kept: list[asyncio.Task[None]] = []

    @engine.workflow(name="w")
    async def w(ctx: durably.AsyncContext) -> str:
        group = ctx.branches(["slow"])

        async def slow() -> None:
            with group.branch(0):
                await asyncio.sleep(5)

        kept.append(asyncio.create_task(slow()))
        await asyncio.sleep(0.01)
        return "done"  # the framework forgot its task

    _run_blocked(engine, w, "r", r"returned while 1 ctx.branches branch\(es\) were still entered")


def test_a_thread_that_outlives_the_workflow_runs_no_step(engine: durably.Engine) -> None:
    """A framework thread that enters its branch after the workflow returned: its step
    is refused (ConfigError in that thread), never run live after the run completed, and
    the completed run's history gets no record after its outcome."""
    tools = Tools()
    late = tools.sync("late")
    errors: list[BaseException] = []
    threads: list[threading.Thread] = []
    began = threading.Event()

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> str:
        group = ctx.branches(["late"])

        def body() -> None:
            began.wait(10)
            try:
                with group.branch(0):
                    ctx.step("late", late)
            except BaseException as exc:  # the thread's outcome, checked below
                errors.append(exc)

        threads.append(threading.Thread(target=body))
        threads[0].start()
        return "done"  # the framework forgot its thread

    assert engine.run(w, run_id="r") == "done"
    began.set()
    threads[0].join(10)
    assert [type(e) for e in errors] == [durably.ConfigError]
    assert "after the workflow returned" in str(errors[0])
    assert tools.calls == Counter()
    assert [r.kind for r in engine.history("r")] == [GATHER]


def test_a_step_retry_after_the_workflow_failed_is_not_run(engine: durably.Engine) -> None:
    """A branch still in a step's backoff when the workflow raises (the run fails): its
    next attempt must not run after the attempt ended (the run is terminal)."""
    attempts: list[float] = []
    in_backoff = threading.Event()
    threads: list[threading.Thread] = []

    @durably.step(retries=1, backoff=0.2)
    def flaky() -> str:
        attempts.append(time.monotonic())
        if len(attempts) == 1:
            in_backoff.set()
            raise OSError("transient")
        return "ok"

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> str:
        group = ctx.branches(["flaky"])

        def body() -> None:
            with contextlib.suppress(BaseException), group.branch(0):
                ctx.step("flaky", flaky)

        threads.append(threading.Thread(target=body))
        threads[0].start()
        in_backoff.wait(10)
        raise ValueError("the framework gave up")

    with pytest.raises(durably.WorkflowFailed):
        engine.run(w, run_id="r")
    threads[0].join(10)
    assert len(attempts) == 1
    assert engine.get_run("r").status == "failed"


def test_a_task_that_outlives_an_async_workflow_runs_no_step(engine: durably.Engine) -> None:
    """The async form: a task the framework left on the caller's loop enters its branch
    after ``run_async`` returned; its step is refused, never run after the run completed."""
    tools = Tools()
    late = tools.aio("late")
    errors: list[BaseException] = []
    kept: list[asyncio.Task[None]] = []

    @engine.workflow(name="w")
    async def w(ctx: durably.AsyncContext) -> str:
        group = ctx.branches(["late"])

        async def body() -> None:
            await asyncio.sleep(0.05)
            try:
                with group.branch(0):
                    await ctx.step("late", late)
            except BaseException as exc:  # the task's outcome, checked below
                errors.append(exc)

        kept.append(asyncio.create_task(body()))
        return "done"  # the framework forgot its task

    async def main() -> str:
        out = await engine.run_async(w, run_id="r")
        await kept[0]
        return out

    assert asyncio.run(main()) == "done"
    assert [type(e) for e in errors] == [durably.ConfigError]
    assert tools.calls == Counter()
    assert [r.kind for r in engine.history("r")] == [GATHER]
