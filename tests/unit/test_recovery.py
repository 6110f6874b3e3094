"""A person's recovery of runs: ``engine.retry`` re-opens a failed run at its failed
position, ``engine.fork`` starts a new run from a position of an old one."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import durably
from durably.cli import main as cli


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'j.db'}"


@pytest.fixture
def engine(db: str) -> Any:
    e = durably.Engine(db)
    yield e
    e.close()


class Agent:
    """A three-step agent: a paid model call, a flaky tool, a keyed effect."""

    def __init__(self, engine: durably.Engine) -> None:
        self.calls: Counter[str] = Counter()
        self.keys: dict[str, list[str]] = {}
        self.tool_down = True
        agent = self

        def model(prompt: str) -> str:
            agent.calls["model"] += 1  # a call paid for
            return f"plan for {prompt}"

        def lookup(plan: str, *, idempotency_key: str) -> str:
            agent.calls["lookup"] += 1
            agent.keys.setdefault("lookup", []).append(idempotency_key)
            if agent.tool_down:
                raise ConnectionError("search API down")
            return f"facts for {plan}"

        @durably.step(effect=True)
        def post(text: str, *, idempotency_key: str) -> str:
            agent.calls["post"] += 1
            agent.keys.setdefault("post", []).append(idempotency_key)
            return f"posted {text}"

        @engine.workflow(name="agent")
        def run(ctx: durably.Context, prompt: str) -> str:
            plan = ctx.step("model", model, prompt)
            facts = ctx.step("lookup", lookup, plan)
            return ctx.step("post", post, facts)

        self.workflow = run


def test_retry_re_opens_a_failed_run_at_its_failed_step(engine: durably.Engine) -> None:
    agent = Agent(engine)
    with pytest.raises(durably.WorkflowFailed, match="search API down"):
        engine.run(agent.workflow, "disk full", run_id="r")
    before = engine.get_run("r")
    assert before.status == "failed"
    with pytest.raises(durably.WorkflowFailed):  # a failed run stays failed when run again
        engine.run(agent.workflow, "disk full", run_id="r")
    agent.tool_down = False  # the dependency is back
    queued = engine.retry("r")
    assert (queued.status, queued.error_type, queued.outcome, queued.finished_at) == (
        "queued",
        None,
        None,
        None,
    )
    assert (
        engine.run(agent.workflow, "disk full", run_id="r") == "posted facts for plan for disk full"
    )
    # The model call paid for is not paid again; the failed step ran again, same key.
    assert agent.calls == Counter({"model": 1, "lookup": 2, "post": 1})
    assert agent.keys["lookup"] == [before.key("1")] * 2
    after = engine.get_run("r")
    assert after.status == "completed" and after.incarnation == before.incarnation
    assert [(s.position, s.status) for s in engine.history("r")] == [
        ("0", "ok"),
        ("1", "ok"),
        ("2", "ok"),
    ]


def test_retry_of_a_workflow_that_raised_replays_and_runs_on(engine: durably.Engine) -> None:
    calls: Counter[str] = Counter()
    broken = {"bug": True}

    def model() -> str:
        calls["model"] += 1
        return "plan"

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> str:
        plan = ctx.step("model", model)
        if broken["bug"]:
            raise KeyError("a bug in the workflow, fixed since")
        return ctx.step("use", lambda p: f"used {p}", plan)

    with pytest.raises(durably.WorkflowFailed, match="KeyError"):
        engine.run(w, run_id="r")
    broken["bug"] = False
    engine.retry("r")
    assert engine.resume("r") == "used plan"
    assert calls == Counter({"model": 1})


def test_retry_keeps_failures_the_workflow_caught(engine: durably.Engine) -> None:
    calls: Counter[str] = Counter()
    down = {"b": True}

    def a() -> str:
        calls["a"] += 1
        raise TimeoutError("a is slow")

    def b() -> str:
        calls["b"] += 1
        if down["b"]:
            raise ConnectionError("b is down")
        return "b"

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> str:
        try:
            got = ctx.step("a", a)
        except durably.StepFailed:
            got = ctx.step("fallback", lambda: "fallback")
        return got + ctx.step("b", b)

    with pytest.raises(durably.WorkflowFailed):
        engine.run(w, run_id="r")
    down["b"] = False
    engine.retry("r")
    # The caught failure at 0 replays (same path); only b, which ended the run, re-runs.
    assert engine.resume("r") == "fallbackb"
    assert calls == Counter({"a": 1, "b": 2})


def test_retry_of_a_failed_gather_re_runs_only_the_failed_branch(
    engine: durably.Engine,
) -> None:
    calls: Counter[str] = Counter()
    down = {"on": True}

    async def fetch(name: str) -> str:
        calls[name] += 1
        if name == "bad" and down["on"]:
            raise ConnectionError("down")
        return name

    @engine.workflow(name="w")
    async def w(ctx: durably.AsyncContext) -> list[str]:
        first = await ctx.step("first", fetch, "first")
        got = await ctx.gather(ctx.step("good", fetch, "good"), ctx.step("bad", fetch, "bad"))
        return [first, *got]

    with pytest.raises(durably.WorkflowFailed):
        engine.run(w, run_id="r")
    down["on"] = False
    engine.retry("r")
    assert engine.run(w, run_id="r") == ["first", "good", "bad"]
    assert calls == Counter({"first": 1, "good": 1, "bad": 2})


def failure_handlers(down: dict[str, bool], calls: Counter[str]) -> dict[str, Any]:
    """Workflows whose failure handling records more positions after the failed step."""

    def flaky() -> str:
        calls["flaky"] += 1
        if down["on"]:
            raise ConnectionError("search API down")
        return "facts"

    def note() -> str:
        calls["note"] += 1
        return "noted"

    def cleanup_step(ctx: durably.Context) -> str:
        try:
            return ctx.step("flaky", flaky)
        finally:
            ctx.step("note", note)  # a cleanup step after the failure

    def time_then_raise(ctx: durably.Context) -> str:
        try:
            return ctx.step("flaky", flaky)
        except durably.StepFailed:
            ctx.now()  # when it gave up, recorded with the failure outcome
            raise

    async def in_a_branch(ctx: durably.AsyncContext) -> list[str]:
        async def branch() -> str:
            try:
                return await ctx.step("flaky", flaky)
            finally:
                await ctx.step("note", note)

        return await ctx.gather(branch(), ctx.step("other", lambda: "other"))

    return {"cleanup": cleanup_step, "now": time_then_raise, "branch": in_a_branch}


@pytest.mark.parametrize(("kind", "at"), [("cleanup", 0), ("now", 0), ("branch", 0)])
def test_retry_refuses_a_failure_the_workflow_recorded_past(
    engine: durably.Engine, kind: str, at: int
) -> None:
    """Records after the failed step (a finally block, a time taken in an except block):
    a retry could only replay the same failure, so it says so and names the fork that
    runs the step again, instead of queueing a run that fails again without trying."""
    calls: Counter[str] = Counter()
    down = {"on": True}
    w = engine.workflow(name=kind)(failure_handlers(down, calls)[kind])
    with pytest.raises(durably.WorkflowFailed, match="search API down"):
        engine.run(w, run_id="r")
    before = engine.get_run("r")
    with pytest.raises(durably.ConfigError, match=rf"`durably fork r --at {at}`"):
        engine.retry("r")
    assert engine.get_run("r") == before  # nothing was changed
    out = CliRunner().invoke(cli, ["retry", "r", "--db", engine.store.url])
    assert out.exit_code == 1 and "durably fork r --at" in out.output
    down["on"] = False
    handle = engine.fork("r", at=at, new_run_id="r-2")
    assert engine.resume(handle.run_id) in ("facts", ["facts", "other"])
    assert calls["flaky"] == 2


def test_retry_after_a_caught_failure_and_a_workflow_error_replays(
    engine: durably.Engine,
) -> None:
    """The refusal above is only for a step's failure: a workflow that caught a failure,
    recorded more and then raised its own error re-runs from its replay as before."""
    calls: Counter[str] = Counter()
    broken = {"bug": True}

    def flaky() -> str:
        calls["flaky"] += 1
        raise ConnectionError("down")

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> str:
        try:
            ctx.step("flaky", flaky)
        except durably.StepFailed:
            got = ctx.step("fallback", lambda: "fallback")
        if broken["bug"]:
            raise KeyError("a bug, fixed since")
        return got

    with pytest.raises(durably.WorkflowFailed, match="KeyError"):
        engine.run(w, run_id="r")
    broken["bug"] = False
    engine.retry("r")
    assert engine.resume("r") == "fallback" and calls["flaky"] == 1


def test_a_retry_racing_another_persons_retry_changes_nothing(db: str) -> None:
    """Person A reads a blocked run; before A's requeue lands, person B retries it and it
    is driven until it fails. A's retry of a *blocked* run must not requeue the now
    *failed* one without its retry's drops (it would replay the failure and fail again at
    once, without trying the step): it is refused and the run stays failed for A to look
    at again."""
    calls: Counter[str] = Counter()
    state = {"bug": True, "down": True}

    def plan() -> Any:
        calls["plan"] += 1
        return object() if state["bug"] else "plan"  # unencodable: the run blocks

    def lookup(plan: str) -> str:
        calls["lookup"] += 1
        if state["down"]:
            raise ConnectionError("search API down")
        return f"facts for {plan}"

    a, b = durably.Engine(db), durably.Engine(db)
    for e in (a, b):

        @e.workflow(name="w")
        def w(ctx: durably.Context) -> str:
            return ctx.step("lookup", lookup, ctx.step("plan", plan))

    with pytest.raises(durably.SerializationError):
        a.run("w", run_id="r")
    assert a.get_run("r").status == "blocked"
    state["bug"] = False
    requeue = a.store.requeue

    def b_goes_first(*args: Any, **kwargs: Any) -> Any:
        b.retry("r")  # B's retry of the blocked run, driven until the lookup fails
        with pytest.raises(durably.WorkflowFailed, match="search API down"):
            b.resume("r")
        return requeue(*args, **kwargs)

    a.store.requeue = b_goes_first  # type: ignore[method-assign]
    with pytest.raises(durably.DurablyError, match="is failed, not"):
        a.retry("r")
    a.store.requeue = requeue  # type: ignore[method-assign]
    assert a.get_run("r").status == "failed"
    # A looks again: the failed run re-opens at its failed step, which runs again.
    state["down"] = False
    a.retry("r")
    assert a.resume("r") == "facts for plan" and calls["lookup"] == 2
    a.close()
    b.close()


def test_retry_refuses_a_completed_run(engine: durably.Engine) -> None:
    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> str:
        return "done"

    engine.run(w, run_id="r")
    with pytest.raises(durably.DurablyError, match="is completed, not"):
        engine.retry("r")
    with pytest.raises(durably.RunNotFound):
        engine.retry("nope")


def test_cli_retry_re_opens_a_failed_run(engine: durably.Engine, db: str) -> None:
    agent = Agent(engine)
    with pytest.raises(durably.WorkflowFailed):
        engine.run(agent.workflow, "x", run_id="r")
    out = CliRunner().invoke(cli, ["retry", "r", "--json", "--db", db])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["status"] == "queued"
    agent.tool_down = False
    assert engine.resume("r") == "posted facts for plan for x"
    assert agent.calls["model"] == 1


# -- fork -----------------------------------------------------------------------------------


def finished_agent(engine: durably.Engine) -> Agent:
    agent = Agent(engine)
    agent.tool_down = False
    engine.run(agent.workflow, "disk full", run_id="orig")
    return agent


def test_fork_replays_below_at_and_goes_live_from_it_under_new_keys(
    engine: durably.Engine,
) -> None:
    agent = finished_agent(engine)
    handle = engine.fork("orig", at=2, new_run_id="orig-2")
    assert handle.run_id == "orig-2" and handle.status() == "queued"
    fork = engine.get_run("orig-2")
    orig = engine.get_run("orig")
    assert fork.incarnation not in (None, orig.incarnation)
    assert [s.position for s in engine.history("orig-2")] == ["0", "1"]
    assert engine.resume("orig-2") == "posted facts for plan for disk full"
    # 0 and 1 replayed from the copy; the effect at 2 happened again, under a new key.
    assert agent.calls == Counter({"model": 1, "lookup": 1, "post": 2})
    assert agent.keys["post"] == [orig.key("2"), fork.key("2")]
    assert handle.result(timeout_s=5) == "posted facts for plan for disk full"
    assert engine.get_run("orig") == orig  # the original is not changed


def test_fork_at_zero_runs_everything_again(engine: durably.Engine) -> None:
    agent = finished_agent(engine)
    handle = engine.fork("orig", at=0)
    assert len(handle.run_id) == 32 and engine.history(handle.run_id) == []
    engine.run(agent.workflow, "disk full", run_id=handle.run_id)
    assert agent.calls == Counter({"model": 2, "lookup": 2, "post": 2})


def test_fork_of_a_failed_run_at_its_failed_step(engine: durably.Engine) -> None:
    agent = Agent(engine)
    with pytest.raises(durably.WorkflowFailed):
        engine.run(agent.workflow, "x", run_id="orig")
    agent.tool_down = False
    handle = engine.fork("orig", at=1)
    assert engine.resume(handle.run_id) == "posted facts for plan for x"
    assert agent.calls == Counter({"model": 1, "lookup": 2, "post": 1})
    assert engine.get_run("orig").status == "failed"


def test_fork_copies_recorded_values_and_caught_failures(engine: durably.Engine) -> None:
    calls: Counter[str] = Counter()

    def flaky() -> str:
        calls["flaky"] += 1
        raise ValueError("nope")

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> list[Any]:
        values: list[Any] = [ctx.random(), str(ctx.uuid()), ctx.now().isoformat()]
        try:
            ctx.step("flaky", flaky)
        except durably.StepFailed as e:
            values.append(e.message)
        values.append(ctx.random())
        return values

    first = engine.run(w, run_id="orig")
    handle = engine.fork("orig", at=4)
    again = engine.resume(handle.run_id)
    assert again[:4] == first[:4]  # recorded values and the caught failure replay
    assert calls["flaky"] == 1


def test_fork_of_a_gather_copies_its_branches(engine: durably.Engine) -> None:
    calls: Counter[str] = Counter()

    async def fetch(name: str) -> str:
        calls[name] += 1
        return name

    @engine.workflow(name="w")
    async def w(ctx: durably.AsyncContext) -> list[str]:
        got = await ctx.gather(ctx.step("a", fetch, "a"), ctx.step("b", fetch, "b"))
        return [*got, await ctx.step("c", fetch, "c")]

    engine.run(w, run_id="orig")
    handle = engine.fork("orig", at=1)
    assert engine.run(w, run_id=handle.run_id) == ["a", "b", "c"]
    assert calls == Counter({"a": 1, "b": 1, "c": 2})


def test_fork_refuses_bad_positions_and_taken_run_ids(engine: durably.Engine) -> None:
    finished_agent(engine)
    with pytest.raises(durably.ConfigError, match="fork at 3 or earlier"):
        engine.fork("orig", at=4)
    with pytest.raises(durably.ConfigError, match="an int >= 0"):
        engine.fork("orig", at=-1)
    with pytest.raises(durably.ConfigError, match="an int >= 0"):
        engine.fork("orig", at=True)
    with pytest.raises(durably.ConfigError, match="inside the gather at 1"):
        engine.fork("orig", at="1.0.0")  # type: ignore[arg-type]
    with pytest.raises(durably.RunConflict, match="already exists"):
        engine.fork("orig", at=1, new_run_id="orig")
    with pytest.raises(durably.ConfigError, match="at most 128 characters"):
        engine.fork("orig", at=1, new_run_id="f" * 129)
    with pytest.raises(durably.RunNotFound):
        engine.fork("missing", at=0)
    assert [r.run_id for r in engine.store.list_runs()] == ["orig"]


def test_fork_refuses_to_copy_past_an_effect_in_doubt(engine: durably.Engine, db: str) -> None:
    class Crash(BaseException):
        pass

    def hook(run_id: str, pos: str, name: str, window: str) -> None:
        if (pos, window) == ("1", "effect"):
            raise Crash

    crashing = durably.Engine(db, fault_hook=hook)

    @durably.step(effect=True)
    def send() -> str:
        return "sent"

    @crashing.workflow(name="w")
    def w(ctx: durably.Context) -> str:
        ctx.step("plan", lambda: "p")
        ctx.step("send", send)
        return ctx.step("after", lambda: "a")

    with pytest.raises(Crash):
        crashing.run(w, run_id="orig")
    crashing.close()
    with pytest.raises(durably.ConfigError, match="position 1 holds an effect in doubt"):
        engine.fork("orig", at=2)
    assert engine.fork("orig", at=1).status() == "queued"


def test_cli_fork(engine: durably.Engine, db: str) -> None:
    agent = finished_agent(engine)
    runner = CliRunner()
    out = runner.invoke(cli, ["fork", "orig", "--at", "2", "--run-id", "f1", "--json", "--db", db])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert (data["run_id"], data["status"], data["forked_from"], data["at"]) == (
        "f1",
        "queued",
        "orig",
        2,
    )
    assert data["incarnation"] == engine.get_run("f1").incarnation
    text = runner.invoke(cli, ["fork", "orig", "--at", "1", "--db", db])
    assert text.exit_code == 0, text.output
    assert "again, under new idempotency keys" in text.output
    bad = runner.invoke(cli, ["fork", "orig", "--at", "9", "--db", db])
    assert bad.exit_code != 0 and "fork at 3 or earlier" in bad.output
    taken = runner.invoke(cli, ["fork", "orig", "--at", "1", "--run-id", "f1", "--db", db])
    assert taken.exit_code != 0 and "already exists" in taken.output
    # A position inside a gather, as runs show prints it, gets the gather to fork at.
    inner = runner.invoke(cli, ["fork", "orig", "--at", "1.0.2", "--db", db])
    assert inner.exit_code == 1 and "fork at 1 to redo that whole gather" in inner.output
    for typo in ("-1", "x", " 2"):
        out = runner.invoke(cli, ["fork", "orig", "--at", typo, "--db", db])
        assert out.exit_code == 1 and "fork at a top-level position" in out.output
    assert engine.resume("f1") == "posted facts for plan for disk full"
    assert agent.calls["model"] == 1


def test_a_fork_is_run_by_a_worker(db: str) -> None:
    import threading

    from durably.worker import Worker

    engine = durably.Engine(db)
    agent = finished_agent(engine)
    handle = engine.fork("orig", at=1)
    worker = Worker(engine, concurrency=1, poll_interval_s=0.01)
    t = threading.Thread(target=worker.run, kwargs={"max_runs": 1})
    t.start()
    try:
        assert handle.result(timeout_s=60) == "posted facts for plan for disk full"
    finally:
        worker.stop()
        t.join(30)
    assert agent.calls == Counter({"model": 1, "lookup": 2, "post": 2})
    engine.close()


def two_intents(engine: durably.Engine, calls: Counter[str]) -> Any:
    """A run in doubt about step 0 with a second intent at 1 (a crash with both effects in
    flight leaves that journal); step 1 has a reconcile."""
    from durably import codec
    from durably.history import INTENT, STEP, StepRecord
    from durably.store.base import Owner

    @durably.step(effect=True)
    def send_a() -> str:
        calls["a"] += 1
        return "a"

    def lookup_b(key: str) -> str:
        calls["lookup_b"] += 1
        return "b (found at the receiver)"

    @durably.step(effect=True, reconcile=lookup_b)
    def send_b() -> str:
        calls["b"] += 1
        return "b"

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> list[str]:
        return [ctx.step("a", send_a), ctx.step("b", send_b)]

    engine.start(w, run_id="r")
    token = engine.store.claim("r", Owner("gone", 1, "1"), 30, 10, lambda _: True).fencing_token
    engine.store.append(
        "r",
        token,
        [
            StepRecord(pos, STEP, name, codec.digest(name, (), {}), INTENT, started_at=1.0)
            for pos, name in (("0", "a"), ("1", "b"))
        ],
    )
    engine.store.release("r", token)
    with pytest.raises(durably.RunInDoubt, match="step 0 'a'"):
        engine.run(w, run_id="r")
    return w


def test_retry_of_an_in_doubt_run_drops_only_the_step_in_doubt(engine: durably.Engine) -> None:
    """The person decided about the step the run named; another effect in flight at the
    crash (a sibling gather branch leaves one) still gets its own reconcile."""
    calls: Counter[str] = Counter()
    w = two_intents(engine, calls)
    engine.retry("r")  # the person checked: a did not happen
    assert engine.run(w, run_id="r") == ["a", "b (found at the receiver)"]
    assert calls == Counter({"a": 1, "lookup_b": 1})  # b was asked about, not re-sent


def test_skip_records_the_step_the_run_is_in_doubt_about(engine: durably.Engine, db: str) -> None:
    """With a second intent kept, `durably skip RUN --output X` (no --position) records
    the step the run names, like retry, instead of refusing with '2 steps in doubt'."""
    calls: Counter[str] = Counter()
    w = two_intents(engine, calls)
    out = CliRunner().invoke(cli, ["skip", "r", "--output", '"a (it was sent)"', "--db", db])
    assert out.exit_code == 0, out.output
    assert engine.run(w, run_id="r") == ["a (it was sent)", "b (found at the receiver)"]
    assert calls == Counter({"lookup_b": 1})  # neither effect ran again
