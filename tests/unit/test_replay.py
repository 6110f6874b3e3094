"""Replay semantics on a real SQLite journal: matching, failures, keys, determinism."""

from __future__ import annotations

import datetime as dt
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import durably
import durably.engine
from durably.history import BLOCKED


class Crash(BaseException):
    """Stands in for a process death inside one process (real deaths: tests/crash)."""


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[durably.Engine]:
    e = durably.Engine(f"sqlite:///{tmp_path / 'j.db'}", clock=durably.FakeClock())
    yield e
    e.close()


class Calls:
    """Counts calls of tool functions by name, outside the journal."""

    def __init__(self) -> None:
        self.count: Counter[str] = Counter()
        self.keys: list[str] = []

    def tool(self, name: str, result: Any = None, crash: bool = False) -> Callable[..., Any]:
        def fn(*args: Any, **kwargs: Any) -> Any:
            self.count[name] += 1
            if crash:
                raise Crash(name)
            return result if result is not None else {"tool": name, "args": list(args)}

        fn.__name__ = name
        return fn


def crash_at(position: str, window: str) -> durably.engine.FaultHook:
    """A fault hook that stops the run (like a process death) when the step at
    ``position`` reaches ``window``: a real mid-run interruption, not a finished run."""

    def hook(run_id: str, pos: str, name: str, win: str) -> None:
        if (pos, win) == (position, window):
            raise Crash(f"{pos}:{win}")

    return hook


def test_replay_returns_recorded_outputs_without_calling(engine: durably.Engine) -> None:
    calls = Calls()
    seen: list[list[Any]] = []

    @engine.workflow(name="wf")
    def wf(ctx: durably.Context, x: int) -> list[Any]:
        out: list[Any] = []
        seen.append(out)
        out.append(ctx.step("a", calls.tool("a"), x))
        out.append(ctx.step("b", calls.tool("b"), x + 1))
        out.append(ctx.step("c", calls.tool("c"), x + 2))
        return out

    # Interrupted after b is recorded and before c runs: the resume must replay a and b
    # (the run is not finished, so nothing short-cuts the replay) and go live at c.
    engine.fault_hook = crash_at("2", "before")
    with pytest.raises(Crash):
        engine.run(wf, 1, run_id="r")
    assert engine.get_run("r").status == "running"
    engine.fault_hook = None
    result = engine.run(wf, 1, run_id="r")
    assert calls.count == Counter({"a": 1, "b": 1, "c": 1})
    assert seen[1][:2] == seen[0] and result == seen[1]
    assert result == [{"tool": n, "args": [v]} for n, v in (("a", 1), ("b", 2), ("c", 3))]
    assert [s.name for s in engine.history("r")] == ["a", "b", "c"]


def test_resume_goes_live_at_the_first_unrecorded_step(engine: durably.Engine) -> None:
    calls = Calls()
    crash = {"on": True}

    def b() -> str:
        calls.count["b"] += 1
        if crash["on"]:
            raise Crash("b")
        return "B"

    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> list[Any]:
        return [
            ctx.step("a", calls.tool("a", "A")),
            ctx.step("b", b),
            ctx.step("c", calls.tool("c", "C")),
        ]

    with pytest.raises(Crash):
        engine.run(wf, run_id="r")
    crash["on"] = False
    assert engine.run(wf, run_id="r") == ["A", "B", "C"]
    assert calls.count == Counter({"a": 1, "b": 2, "c": 1})
    assert engine.get_run("r").starts == 2


def _history_then(
    engine: durably.Engine,
    first: Callable[[durably.Context], Any],
    second: Callable[[durably.Context], Any],
    run_id: str = "r",
) -> None:
    """Record a run with ``first`` (crashing at its end), then resume it with ``second``."""
    mode = {"code": first}
    engine._registry.versions.pop("wf", None)  # a deploy: the same workflow name, new code

    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> Any:
        mode["code"](ctx)
        if mode["code"] is first:
            raise Crash("end")
        return "done"

    with pytest.raises(Crash):
        engine.run(wf, run_id=run_id)
    mode["code"] = second


def test_reordered_steps_raise_nondeterminism_naming_both(engine: durably.Engine) -> None:
    t = Calls()
    _history_then(
        engine,
        lambda ctx: (ctx.step("open_ticket", t.tool("x"), 1), ctx.step("page", t.tool("y"))),
        lambda ctx: (ctx.step("page", t.tool("y")), ctx.step("open_ticket", t.tool("x"), 1)),
    )
    with pytest.raises(durably.NonDeterminism) as err:
        engine.run("wf", run_id="r")
    msg = str(err.value)
    assert "step 0: history has 'open_ticket', code asked for 'page' (steps differ)" in msg
    assert engine.get_run("r").status == BLOCKED
    assert t.count == Counter({"x": 1, "y": 1})  # nothing ran on the mismatched replay


def test_changed_input_is_detected(engine: durably.Engine) -> None:
    t = Calls()
    _history_then(
        engine,
        lambda ctx: ctx.step("plan", t.tool("p"), "prompt v1"),
        lambda ctx: ctx.step("plan", t.tool("p"), "prompt v2"),
    )
    with pytest.raises(durably.NonDeterminism, match="inputs differ"):
        engine.run("wf", run_id="r")


def test_changed_keyword_input_is_detected_and_key_order_is_not_a_change(
    engine: durably.Engine,
) -> None:
    """A second, independent check of the input digest: keyword arguments and nested
    values count; the order of a dict's keys does not (canonical JSON)."""
    t = Calls()
    _history_then(
        engine,
        lambda ctx: ctx.step("plan", t.tool("p"), {"a": 1, "b": [1, 2]}, model="m1"),
        lambda ctx: ctx.step("plan", t.tool("p"), {"b": [1, 2], "a": 1}, model="m1"),
    )
    assert engine.run("wf", run_id="r") == "done" and t.count["p"] == 1
    t2 = Calls()
    _history_then(
        engine,
        lambda ctx: ctx.step("plan", t2.tool("p"), {"a": 1}, model="m1"),
        lambda ctx: ctx.step("plan", t2.tool("p"), {"a": 1}, model="m2"),
        run_id="r2",
    )
    with pytest.raises(durably.NonDeterminism, match="inputs differ"):
        engine.run("wf", run_id="r2")
    assert t2.count["p"] == 1 and engine.get_run("r2").status == BLOCKED


def test_changed_name_is_detected(engine: durably.Engine) -> None:
    t = Calls()
    _history_then(
        engine,
        lambda ctx: ctx.step("plan", t.tool("p")),
        lambda ctx: ctx.step("plan2", t.tool("p")),
    )
    with pytest.raises(durably.NonDeterminism, match="history has 'plan'"):
        engine.run("wf", run_id="r")


def test_extra_step_in_the_middle_is_detected(engine: durably.Engine) -> None:
    t = Calls()
    _history_then(
        engine,
        lambda ctx: (ctx.step("a", t.tool("a")), ctx.step("b", t.tool("b"))),
        lambda ctx: (
            ctx.step("a", t.tool("a")),
            ctx.step("new", t.tool("n")),
            ctx.step("b", t.tool("b")),
        ),
    )
    with pytest.raises(durably.NonDeterminism, match="step 1: history has 'b'"):
        engine.run("wf", run_id="r")
    assert t.count["n"] == 0


def test_missing_step_is_detected_when_the_workflow_returns(engine: durably.Engine) -> None:
    t = Calls()
    _history_then(
        engine,
        lambda ctx: (ctx.step("a", t.tool("a")), ctx.step("b", t.tool("b"))),
        lambda ctx: ctx.step("a", t.tool("a")),
    )
    with pytest.raises(durably.NonDeterminism, match=r"step 1: history has 'b'.*asked for nothing"):
        engine.run("wf", run_id="r")
    assert engine.get_run("r").status == BLOCKED


def test_blocked_run_resumes_once_the_code_is_fixed(engine: durably.Engine) -> None:
    t = Calls()
    good = lambda ctx: (ctx.step("a", t.tool("a")), ctx.step("b", t.tool("b")))  # noqa: E731
    _history_then(engine, good, lambda ctx: ctx.step("z", t.tool("z")))
    with pytest.raises(durably.NonDeterminism):
        engine.run("wf", run_id="r")
    # The fix: the original code again. The run completes without re-running a or b.
    engine._registry.versions.clear()

    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> str:
        good(ctx)
        return "done"

    assert engine.run(wf, run_id="r") == "done"
    assert t.count == Counter({"a": 1, "b": 1})


def test_nondeterminism_cannot_be_swallowed(engine: durably.Engine) -> None:
    t = Calls()

    def swallow(ctx: durably.Context) -> None:
        try:
            ctx.step("other", t.tool("o"))
        except Exception:
            pass

    _history_then(engine, lambda ctx: ctx.step("a", t.tool("a")), swallow)
    with pytest.raises(durably.NonDeterminism):
        engine.run("wf", run_id="r")
    assert engine.get_run("r").status == BLOCKED


def test_final_failure_is_recorded_and_replays_identically(engine: durably.Engine) -> None:
    attempts: list[str] = []

    @durably.step(retries=2, backoff=0.5)
    def flaky(x: int, *, idempotency_key: str) -> int:
        attempts.append(idempotency_key)
        raise ValueError(f"no good: {x}")

    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> str:
        try:
            ctx.step("flaky", flaky, 7)
        except durably.StepFailed as e:
            assert e.type_name == "ValueError" and e.message == "no good: 7"
            return f"handled {e.type_name}"
        return "unreachable"

    assert engine.run(wf, run_id="r") == "handled ValueError"
    assert attempts == [engine.get_run("r").key("0")] * 3  # 1 + 2 retries, one key
    [rec] = engine.history("r")
    assert (rec.status, rec.attempts, rec.error_type) == ("failed", 3, "ValueError")
    # Replay on a fresh run of the same code: the same path, without calling flaky.
    engine.store._conn.execute("UPDATE runs SET status='running' WHERE run_id='r'")  # type: ignore[attr-defined]
    assert engine.run(wf, run_id="r") == "handled ValueError"
    assert len(attempts) == 3


def test_step_failed_carries_the_cause_live(engine: durably.Engine) -> None:
    def boom() -> None:
        raise KeyError("k")

    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> None:
        ctx.step("boom", boom)

    with pytest.raises(durably.WorkflowFailed) as err:
        engine.run(wf, run_id="r")
    assert err.value.type_name == "KeyError" and isinstance(err.value.__cause__, durably.StepFailed)
    assert isinstance(err.value.__cause__.__cause__, KeyError)
    with pytest.raises(durably.WorkflowFailed) as again:  # recorded outcome, nothing runs
        engine.run(wf, run_id="r")
    assert (again.value.type_name, again.value.message) == ("KeyError", "'k'")


def test_retry_on_and_no_retry(engine: durably.Engine) -> None:
    seen: Counter[str] = Counter()

    @durably.step(
        retries=3, backoff=0, retry_on=(ConnectionError,), no_retry=(ConnectionResetError,)
    )
    def call(kind: str) -> None:
        seen[kind] += 1
        raise {
            "refused": ConnectionRefusedError,
            "reset": ConnectionResetError,
            "value": ValueError,
        }[kind]("x")

    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> list[str]:
        out = []
        for kind in ("refused", "reset", "value"):
            try:
                ctx.step(kind, call, kind)
            except durably.StepFailed as e:
                out.append(e.type_name)
        return out

    assert engine.run(wf, run_id="r") == [
        "ConnectionRefusedError",
        "ConnectionResetError",
        "ValueError",
    ]
    assert seen == Counter({"refused": 4, "reset": 1, "value": 1})


def test_workflow_exception_is_recorded(engine: durably.Engine) -> None:
    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> None:
        raise RuntimeError("bad plan")

    with pytest.raises(durably.WorkflowFailed, match="RuntimeError: bad plan"):
        engine.run(wf, run_id="r")
    run = engine.get_run("r")
    assert (run.status, run.error_type, run.error_message) == ("failed", "RuntimeError", "bad plan")


@pytest.mark.parametrize("window", ["effect", "recorded"])
def test_now_random_uuid_replay_the_same_values(engine: durably.Engine, window: str) -> None:
    clock = engine.clock
    assert isinstance(clock, durably.FakeClock)
    seen: list[tuple[Any, ...]] = []
    calls = Calls()

    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> list[Any]:
        values = (ctx.now(), ctx.random(), ctx.uuid())
        seen.append(values)
        ctx.step("mid", calls.tool("mid"))
        ctx.step("last", calls.tool("last"))
        return [ctx.now(), *values]

    # Interrupted inside the step after the values (they ride with its first write), on a
    # real resume (the run is unfinished), with the clock an hour later.
    engine.fault_hook = crash_at("3", window)
    with pytest.raises(Crash):
        engine.run(wf, run_id="r")
    clock.advance(3600)
    engine.fault_hook = None
    later, *values = engine.run(wf, run_id="r")
    first, second = seen
    assert first == second == tuple(values)  # the same values, not merely the same types
    now, rnd, uid = values
    assert isinstance(now, dt.datetime) and now.tzinfo is not None and isinstance(rnd, float)
    assert isinstance(uid, uuid.UUID) and later - now == dt.timedelta(hours=1)
    assert calls.count == Counter({"mid": 2 if window == "effect" else 1, "last": 1})


def test_a_value_used_by_an_interrupted_step_stays_consistent(engine: durably.Engine) -> None:
    """Interrupted before the step that uses a value runs: whether or not the value's
    record reached the journal (it may ride with the next write), the step's input and the
    result are the value the finishing attempt saw."""
    seen: list[float] = []

    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> float:
        seen.append(ctx.random())
        return ctx.step("use", lambda r: r, seen[-1])

    engine.fault_hook = crash_at("1", "before")
    with pytest.raises(Crash):
        engine.run(wf, run_id="r")
    kept = [r for r in engine.history("r") if r.name == "durably.random"]
    engine.fault_hook = None
    assert engine.run(wf, run_id="r") == seen[1]
    if kept:  # flushed early: then it must have been replayed
        assert seen[0] == seen[1]


def test_an_effects_intent_carries_the_values_before_it(engine: durably.Engine) -> None:
    """DESIGN: values may ride with the next durable write, and an effect's intent always
    flushes them first. Killed after the effect ran (intent written, result not), the
    resume must see the same value, so the effect is retried with the same input and key
    instead of NonDeterminism (or a second charge of another amount)."""
    charges: list[tuple[str, float]] = []

    @durably.step(effect=True)
    def charge(amount: float, *, idempotency_key: str) -> str:
        charges.append((idempotency_key, amount))
        return f"ch_{amount}"

    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> str:
        return ctx.step("charge", charge, round(ctx.random() * 100, 2))

    engine.fault_hook = crash_at("1", "effect")
    with pytest.raises(Crash):
        engine.run(wf, run_id="r")
    engine.fault_hook = None
    assert engine.run(wf, run_id="r") == f"ch_{charges[0][1]}"
    assert len(charges) == 2 and charges[0] == charges[1]


def test_the_promo_clock_bug_cannot_happen(engine: durably.Engine) -> None:
    """The video's bug: a live clock on replay flips a branch and charges twice."""
    clock = engine.clock
    assert isinstance(clock, durably.FakeClock)
    promo_end = dt.datetime.fromtimestamp(clock.time() + 60, dt.UTC)
    charges: list[tuple[str, int]] = []
    crash = {"on": True}

    @durably.step(effect=True)
    def charge(amount: int, *, idempotency_key: str) -> str:
        charges.append((idempotency_key, amount))
        return f"ch_{len(charges)}"

    def email() -> None:
        if crash["on"]:
            raise Crash("after charge")

    @engine.workflow(name="checkout")
    def checkout(ctx: durably.Context) -> str:
        price = 80 if ctx.now() < promo_end else 100
        receipt = ctx.step("charge", charge, price)
        ctx.step("email", email)
        return receipt

    with pytest.raises(Crash):
        engine.run(checkout, run_id="order-1")
    clock.advance(3600)  # the promo ended while the run was down
    crash["on"] = False
    assert engine.run(checkout, run_id="order-1") == "ch_1"
    assert charges == [(engine.get_run("order-1").key("1"), 80)]


@dataclass
class Plan:
    """A typed step output (module level, so its annotations resolve)."""

    title: str
    when: dt.datetime
    tags: tuple[str, ...]


def test_step_output_is_decoded_from_the_return_annotation(engine: durably.Engine) -> None:
    def plan() -> Plan:
        return Plan("t", dt.datetime(2026, 1, 2, tzinfo=dt.UTC), ("a", "b"))

    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> str:
        p = ctx.step("plan", plan)
        assert isinstance(p, Plan) and p.tags == ("a", "b")
        return p.title

    assert engine.run(wf, run_id="r") == "t"
    engine.store._conn.execute("UPDATE runs SET status='running' WHERE run_id='r'")  # type: ignore[attr-defined]
    assert engine.run(wf, run_id="r") == "t"


def test_unencodable_output_names_the_step_and_type(engine: durably.Engine) -> None:
    class Client:
        pass

    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> None:
        ctx.step("connect", Client)

    with pytest.raises(durably.SerializationError, match=r"step 0 'connect' output.*Client"):
        engine.run(wf, run_id="r")
    assert engine.get_run("r").status == BLOCKED


def test_unencodable_argument_says_to_use_a_closure(engine: durably.Engine) -> None:
    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> None:
        ctx.step("use", lambda c: None, object())

    with pytest.raises(durably.SerializationError, match="closure"):
        engine.run(wf, run_id="r")


def test_repeated_step_names_are_told_apart_by_position(engine: durably.Engine) -> None:
    keys: list[str] = []

    def tool(*, idempotency_key: str) -> str:
        keys.append(idempotency_key)
        return idempotency_key

    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> list[str]:
        return [ctx.step("same", tool) for _ in range(3)]

    keys_run = engine.run(wf, run_id="run-9")
    incarnation = engine.get_run("run-9").incarnation
    assert keys_run == [f"run-9:{incarnation}:{i}" for i in range(3)]


def test_fencing_token_reaches_the_step(engine: durably.Engine) -> None:
    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> int:
        return ctx.step("t", lambda *, fencing_token: fencing_token)

    assert engine.run(wf, run_id="r") == 1


def test_usage_is_recorded_on_the_step(engine: durably.Engine) -> None:
    def model() -> str:
        durably.usage(tokens=1200, cost_usd=0.01)
        durably.usage(tokens=300)
        return "ok"

    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> str:
        return ctx.step("model", model)

    engine.run(wf, run_id="r")
    [rec] = engine.history("r")
    assert (rec.usage_tokens, rec.usage_cost_usd) == (1500, 0.01)
    durably.usage(tokens=5)  # outside a step: a no-op, tools stay usable without durably


def test_step_timeout_fails_the_attempt(engine: durably.Engine) -> None:
    import threading

    release = threading.Event()

    @durably.step(timeout_s=0.05)
    def slow() -> None:
        release.wait(5)

    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> str:
        try:
            ctx.step("slow", slow)
        except durably.StepFailed as e:
            return e.type_name
        return "no timeout"

    try:
        assert engine.run(wf, run_id="r") == "durably.errors.StepTimeout"
    finally:
        release.set()
