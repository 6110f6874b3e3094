"""The replay core against a model: random workflows, random crash points, replay = live.

A program is a JSON list of operations (it is the workflow's input, so the journal holds
it): recorded steps that succeed, succeed after retries, or fail for good (caught or not),
some of them effects, async or sync functions (a sync one in an async workflow too);
``now``/``random``/``uuid``; and ``ctx.gather`` of branches (nested, with or without
``return_exceptions``). One interpreter runs a program three ways: on a sync
:class:`durably.Context`, on an :class:`durably.AsyncContext`, and on a model that knows
what each operation must produce without any journal. A state machine drives one run
through attempts that the engine's fault hook interrupts at a random step window (an
exception that is not an ``Exception``, like a process death), then finishes it and runs
the same program once more without interruptions. It checks observable behaviour only
(results, calls seen by the world, public positions and keys), not record layouts:

- no attempt calls a step whose result was in the journal when the attempt started;
- a value or step result, once in the journal, is seen identically by every later attempt;
- every attempt of a step gets one idempotency key, ending in the step's position;
- the final result (or failure) equals the model's for the values the run recorded, and
  so does the uninterrupted run's; both applied the same effects, each once;
- a faithful replay never raises ``NonDeterminism`` (any error fails the test).

The default profile is small enough for ``make test``; the ``torture`` test runs more
examples (``DURABLY_TORTURE_EXAMPLES``, default 200).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import itertools
import json
import os
import threading
import uuid
from collections import defaultdict
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    precondition,
    rule,
    run_state_machine_as_test,
)

import durably

Op = list[Any]
ALWAYS = -1  # fail_first of a step that fails on every call
# Records whose position shows one value (a gather's position shows all its branches,
# some of whose values may not be journaled yet).
PINNED_KINDS = frozenset({"step", "now", "random", "uuid"})


class Crash(BaseException):
    """An injected interruption: like a process death, never caught by ``except
    Exception`` in workflow code."""


# -- the world: counts every call, applies keyed effects once --------------------------


class World:
    """Outside the journal: every call of every step function, and the effects applied
    (deduplicated on the idempotency key, like a receiving service)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.attempt = 0
        self.calls: defaultdict[str, int] = defaultdict(int)
        self.log: list[tuple[int, str]] = []
        self.applied: dict[str, Any] = {}

    def call(self, label: str, pos: str, fail_first: int, arg: str, key: str, effect: bool) -> Any:
        assert key.endswith(f":{pos}"), f"step {label} at {pos} got key {key!r}"
        with self.lock:
            self.calls[key] += 1
            self.log.append((self.attempt, key))
            if fail_first == ALWAYS or self.calls[key] <= fail_first:
                raise ValueError(f"{label} is down")
            out = {"label": label, "arg": arg}
            if effect:
                return self.applied.setdefault(key, out)
            return out


WORLD = World()


def _step_fn(retries: int, effect: bool, is_async: bool) -> Callable[..., Any]:
    opts = durably.step(retries=retries, backoff=0, effect=effect)
    if not is_async:

        def sync_fn(label: str, pos: str, fail: int, arg: str, *, idempotency_key: str) -> Any:
            return WORLD.call(label, pos, fail, arg, idempotency_key, effect)

        return opts(sync_fn)

    async def async_fn(label: str, pos: str, fail: int, arg: str, *, idempotency_key: str) -> Any:
        await asyncio.sleep(0)  # a suspension point, so gather branches interleave
        return WORLD.call(label, pos, fail, arg, idempotency_key, effect)

    return opts(async_fn)


STEP_FNS = {
    (r, e, a): _step_fn(r, e, a)
    for r, e, a in itertools.product(range(3), (False, True), (False, True))
}


# -- one interpreter, three adapters ----------------------------------------------------


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _shown(value: Any) -> Any:
    """What a value looks like in a result: JSON, whatever its type."""
    if isinstance(value, dt.datetime):
        assert value.tzinfo is not None
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


class Adapter:
    """How the interpreter performs operations; ``obs`` keeps what each position showed."""

    is_async = True

    def __init__(self) -> None:
        self.obs: dict[str, Any] = {}

    async def step(self, pos: str, op: Op, arg: str) -> Any:
        raise NotImplementedError

    async def value(self, pos: str, kind: str) -> Any:
        raise NotImplementedError

    async def gather(self, branches: list[Coroutine[Any, Any, Any]], re: bool) -> list[Any]:
        raise NotImplementedError


class Real(Adapter):
    """Operations on a durably context (``is_async`` says which kind)."""

    def __init__(self, ctx: durably.Context | durably.AsyncContext) -> None:
        super().__init__()
        self.ctx = ctx
        self.is_async = isinstance(ctx, durably.AsyncContext)

    async def step(self, pos: str, op: Op, arg: str) -> Any:
        _, label, fail_first, retries, effect, _catch, sync_fn = op
        fn = STEP_FNS[(retries, effect, self.is_async and not sync_fn)]
        if isinstance(self.ctx, durably.AsyncContext):
            return await self.ctx.step(label, fn, label, pos, fail_first, arg)
        return self.ctx.step(label, fn, label, pos, fail_first, arg)

    async def value(self, pos: str, kind: str) -> Any:
        got = getattr(self.ctx, kind)()
        return await got if isinstance(self.ctx, durably.AsyncContext) else got

    async def gather(self, branches: list[Coroutine[Any, Any, Any]], re: bool) -> list[Any]:
        assert isinstance(self.ctx, durably.AsyncContext)
        out = await self.ctx.gather(*branches, return_exceptions=re)
        for item in out:
            if isinstance(item, BaseException) and not isinstance(item, Exception):
                raise item  # an interruption inside a branch: this attempt is over
        return out


class Model(Adapter):
    """What each operation must produce, from the program alone (values are given)."""

    def __init__(self, values: dict[str, Any]) -> None:
        super().__init__()
        self.values = values
        self.applied: set[str] = set()

    async def step(self, pos: str, op: Op, arg: str) -> Any:
        _, label, fail_first, _retries, effect, _catch, _sync_fn = op
        if fail_first == ALWAYS:
            raise durably.StepFailed(label, pos, "ValueError", f"{label} is down")
        if effect:
            self.applied.add(pos)
        return {"label": label, "arg": arg}

    async def value(self, pos: str, kind: str) -> Any:
        return self.values[pos]

    async def gather(self, branches: list[Coroutine[Any, Any, Any]], re: bool) -> list[Any]:
        out: list[Any] = []
        for b in branches:
            try:
                out.append(await b)
            except durably.StepFailed as exc:
                assert re, "the strategy catches failures in gathers without return_exceptions"
                out.append(exc)
        return out


async def interpret(a: Adapter, ops: list[Op], prefix: str, last: str) -> tuple[list[Any], str]:
    """Run ``ops`` in one scope; returns the rows shown and the input of the next step."""
    rows: list[Any] = []
    for i, op in enumerate(ops):
        pos = f"{prefix}{i}"
        if op[0] == "value":
            shown: Any = _shown(await a.value(pos, op[1]))
        elif op[0] == "step":
            try:
                shown = await a.step(pos, op, last)
            except durably.StepFailed as exc:
                shown = ["failed", exc.type_name, exc.message]
                if not op[5]:
                    a.obs[pos] = shown
                    raise
        else:
            _, re, branches = op
            coros = [interpret(a, b, f"{pos}.{j}.", last) for j, b in enumerate(branches)]
            results = await a.gather(coros, re)
            shown = [
                ["raised", r.type_name, r.message] if isinstance(r, durably.StepFailed) else r[0]
                for r in results
            ]
        a.obs[pos] = shown
        rows.append([pos, shown])
        last = _digest(shown)
    return rows, last


def run_sync(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run a coroutine that never suspends (a sync adapter's) without an event loop."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise AssertionError("a sync workflow's interpreter suspended")


def model_outcome(program: list[Op], values: dict[str, Any]) -> tuple[Any, set[str]]:
    """The expected result (or ``("failed", type, message)``) and applied effect positions."""
    m = Model(values)
    try:
        rows, _ = run_sync(interpret(m, program, "", "start"))
    except durably.StepFailed as exc:
        return ("failed", exc.type_name, exc.message), m.applied
    return rows, m.applied


# -- the engine under test ---------------------------------------------------------------


class Harness:
    """One engine with the two workflows that interpret programs; ``obs`` is the current
    attempt's adapter observations (a side channel, outside the journal)."""

    def __init__(self, path: Path) -> None:
        self.clock = durably.FakeClock()
        # NORMAL: no fsync per commit (this tests replay, not power loss); max_starts high
        # so repeated interruptions at one step never quarantine the run.
        self.engine = durably.Engine(
            f"sqlite:///{path}", clock=self.clock, synchronous="NORMAL", max_starts=1000
        )
        self.obs: dict[str, Any] = {}
        engine = self.engine

        @engine.workflow(name="model_sync")
        def model_sync(ctx: durably.Context, program: list[Op]) -> Any:
            a = Real(ctx)
            self.obs = a.obs
            return run_sync(interpret(a, program, "", "start"))[0]

        @engine.workflow(name="model_async")
        async def model_async(ctx: durably.AsyncContext, program: list[Op]) -> Any:
            a = Real(ctx)
            self.obs = a.obs
            return (await interpret(a, program, "", "start"))[0]

    def attempt(self, wf: str, program: list[Op], run_id: str, crash_at: int | None) -> Any:
        """Drive the run once; with ``crash_at``, interrupt it at that fault-hook call
        (and at every later one: a dead process does nothing more)."""
        seen = 0

        def hook(run_id: str, pos: str, name: str, window: str) -> None:
            nonlocal seen
            if crash_at is not None and seen >= crash_at:
                raise Crash(f"{pos}:{window}")
            seen += 1

        self.engine.fault_hook = hook
        self.clock.advance(3600)  # a resume happens later: now() must not move
        try:
            return ("ok", self.engine.run(wf, program, run_id=run_id))
        except durably.WorkflowFailed as exc:
            return ("failed", exc.type_name, exc.message)
        except Crash:
            return ("crashed",)
        finally:
            self.engine.fault_hook = None


# -- programs ----------------------------------------------------------------------------


@st.composite
def step_op(draw: st.DrawFn, must_catch: bool) -> Op:
    retries = draw(st.integers(0, 2))
    mode = draw(st.sampled_from(["ok", "flaky", "fatal"]))
    fail_first = {"ok": 0, "flaky": retries, "fatal": ALWAYS}[mode]
    catch = must_catch or draw(st.booleans())
    # The last field: a sync step function even in an async workflow (it must work there
    # too, inline or in a worker thread).
    return ["step", "", fail_first, retries, draw(st.booleans()), catch, draw(st.booleans())]


def ops_strategy(depth: int, must_catch: bool, gathers: bool) -> st.SearchStrategy[list[Op]]:
    leaf = st.one_of(
        step_op(must_catch),
        st.sampled_from(["now", "random", "uuid"]).map(lambda k: ["value", k]),
    )
    if not gathers or depth >= 2:
        return st.lists(leaf, max_size=4 if depth == 0 else 3)
    gather = st.booleans().flatmap(
        lambda re: st.lists(ops_strategy(depth + 1, not re, gathers), min_size=1, max_size=3).map(
            lambda bs: ["gather", re, bs]
        )
    )
    return st.lists(st.one_of(leaf, leaf, gather), max_size=5 if depth == 0 else 3)


def label_steps(ops: list[Op], counter: itertools.count[int]) -> None:
    """Give every step a distinct name, in program order."""
    for op in ops:
        if op[0] == "step":
            op[1] = f"s{next(counter)}"
        elif op[0] == "gather":
            for b in op[2]:
                label_steps(b, counter)


programs = st.booleans().flatmap(
    lambda is_async: st.tuples(st.just(is_async), ops_strategy(0, False, is_async))
)

RUN_IDS = itertools.count()


class ReplayMachine(RuleBasedStateMachine):
    """One run of a random program: interrupted attempts, then the finish and the checks."""

    harness: Harness

    @initialize(drawn=programs)
    def start(self, drawn: tuple[bool, list[Op]]) -> None:
        is_async, program = drawn
        label_steps(program, itertools.count())
        self.program = program
        self.wf = "model_async" if is_async else "model_sync"
        self.run_id = f"model-{next(RUN_IDS)}"
        self.world = World()
        self.attempts = 0
        self.durable: set[str] = set()  # positions whose result is in the journal
        self.pinned: dict[str, Any] = {}  # what a journaled position showed
        self.outcome: Any = None

    @precondition(lambda self: self.outcome is None)
    @rule(crash_at=st.integers(0, 12))
    def interrupt_and_resume(self, crash_at: int) -> None:
        got = self._attempt(crash_at)
        if got[0] != "crashed":
            self.outcome = got  # it ended before the crash point

    @rule(hours=st.integers(0, 48))
    def time_passes(self, hours: int) -> None:
        # Always applicable (Hypothesis needs one rule that is), and meaningful: a resume
        # may come much later, and recorded clock reads must not move with it.
        self.harness.clock.advance(hours * 3600)

    def teardown(self) -> None:
        if not hasattr(self, "program"):
            return
        if self.outcome is None:
            self.outcome = self._attempt(None)
        assert self.outcome[0] in ("ok", "failed"), self.outcome
        self._check_final()

    def _attempt(self, crash_at: int | None) -> Any:
        global WORLD
        WORLD = self.world
        self.attempts += 1
        self.world.attempt = self.attempts
        got = self.harness.attempt(self.wf, self.program, self.run_id, crash_at)
        obs = self.harness.obs
        # Nothing already journaled ran again, and journaled positions showed the same.
        again = {k for a, k in self.world.log if a == self.attempts and _pos(k) in self.durable}
        assert not again, f"attempt {self.attempts} re-ran journaled steps {sorted(again)}"
        for pos, shown in obs.items():
            if pos in self.pinned:
                assert shown == self.pinned[pos], (pos, shown, self.pinned[pos])
        for rec in self.harness.engine.history(self.run_id):
            if rec.kind in PINNED_KINDS and rec.status in ("ok", "failed"):
                if rec.position not in self.durable and rec.position in obs:
                    self.pinned[rec.position] = obs[rec.position]
                self.durable.add(rec.position)
        return got

    def _check_final(self) -> None:
        obs = self.harness.obs
        expected, effects = model_outcome(self.program, obs)
        assert self.outcome == (("ok", expected) if isinstance(expected, list) else expected)
        _check_keys(self.world)
        assert {_pos(k) for k in self.world.applied} == effects
        # The same program without interruptions: the same result for its own values and
        # the same effects.
        global WORLD
        WORLD = live = World()
        live_id = f"{self.run_id}-live"
        got = self.harness.attempt(self.wf, self.program, live_id, None)
        expected, live_effects = model_outcome(self.program, self.harness.obs)
        assert got == (("ok", expected) if isinstance(expected, list) else expected)
        _check_keys(live)
        assert live_effects == effects and {_pos(k) for k in live.applied} == effects


def _pos(key: str) -> str:
    """The position a key names: every key ends in ``:<position>`` (DESIGN)."""
    return key.rsplit(":", 1)[1]


def _check_keys(world: World) -> None:
    """One key per position, on every attempt and across interruptions."""
    keys: defaultdict[str, set[str]] = defaultdict(set)
    for _, key in world.log:
        keys[_pos(key)].add(key)
    assert all(len(ks) == 1 for ks in keys.values()), dict(keys)


def _run_machine(tmp_path: Path, examples: int) -> None:
    ReplayMachine.harness = Harness(tmp_path / "model.db")
    try:
        run_state_machine_as_test(
            ReplayMachine,
            settings=settings(
                max_examples=examples,
                stateful_step_count=6,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
                database=None,
            ),
        )
    finally:
        ReplayMachine.harness.engine.close()


def test_replay_equals_live_under_random_interruptions(tmp_path: Path) -> None:
    _run_machine(tmp_path, examples=100)


@pytest.mark.torture
@pytest.mark.skipif(
    "DURABLY_TORTURE_EXAMPLES" not in os.environ,
    reason="the long form (DURABLY_TORTURE_EXAMPLES=2000); the suite runs the bounded one,"
    " test_replay_equals_live_under_random_interruptions (the same machine, 100 examples)",
)
def test_replay_equals_live_torture(tmp_path: Path) -> None:
    _run_machine(tmp_path, examples=int(os.environ["DURABLY_TORTURE_EXAMPLES"]))
