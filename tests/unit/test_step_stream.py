"""``ctx.step_stream``: a step whose chunks reach the caller as they arrive, whose
assembled result is recorded once, and whose replay rebuilds the chunks from the record
without calling the function."""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

import durably
import durably.features.stream


class Crash(BaseException):
    """Stands in for a process death inside one process."""


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[durably.Engine]:
    e = durably.Engine(f"sqlite:///{tmp_path / 'j.db'}")
    yield e
    e.close()


@pytest.fixture
def any_engine(journal_url: str) -> Iterator[durably.Engine]:
    e = durably.Engine(journal_url)
    yield e
    e.close()


def crash_at(engine: durably.Engine, position: str) -> None:
    """Make the next live step at ``position`` die before it runs (an interrupted run)."""

    def hook(run_id: str, pos: str, name: str, window: str) -> None:
        if (pos, window) == (position, "before"):
            raise Crash(f"interrupted before {pos}")

    engine.fault_hook = hook


def test_live_and_replay_chunks_are_equal_and_replay_calls_nothing(
    any_engine: durably.Engine,
) -> None:
    engine = any_engine
    calls: list[int] = []
    seen: list[list[Any]] = []

    def tokens(n: int) -> Iterator[dict[str, Any]]:
        calls.append(n)
        info = durably.current_step()
        assert info is not None and durably.current_context() is None
        durably.usage(input_tokens=3, output_tokens=n)
        for i in range(n):
            yield {"text": f"t{i}", "pos": info.position, "attempt": info.attempt}

    @engine.workflow(name="stream")
    def wf(ctx: durably.Context) -> Any:
        got: list[Any] = []
        seen.append(got)
        stream = ctx.step_stream("model", tokens, 4)
        for chunk in stream:
            # Between chunks the caller is in the workflow's body, not in the step.
            assert durably.current_step() is None and durably.current_context() is ctx
            got.append(chunk)
        ctx.step("after", lambda: "done")
        return stream.result

    crash_at(engine, "1")
    with pytest.raises(Crash):
        engine.run(wf, run_id="s")
    engine.fault_hook = None
    result = engine.run(wf, run_id="s")
    assert calls == [4]  # the replay rebuilt the chunks from the record
    live, replayed = seen
    assert live == replayed == result
    assert [c["text"] for c in live] == ["t0", "t1", "t2", "t3"]
    assert {c["pos"] for c in live} == {"0"} and {c["attempt"] for c in live} == {1}
    rec = engine.history("s")[0]
    assert (rec.kind, rec.name, rec.status, rec.attempts) == ("step", "model", "ok", 1)
    assert json.loads(rec.output or "") == live
    spend = engine.spend("s")
    assert spend.tokens == 7  # durably.usage inside the stream counts, once


def test_assemble_and_replay_build_what_is_recorded(engine: durably.Engine) -> None:
    calls: list[str] = []
    hooked: list[tuple[Any, int, int]] = []

    def words(text: str) -> Iterator[str]:
        calls.append(text)
        yield from text.split()

    def assemble(chunks: list[str]) -> dict[str, Any]:
        return {"text": " ".join(chunks), "n": len(chunks)}

    def replay(value: dict[str, Any]) -> Iterator[str]:
        return iter(value["text"].split())

    def hook(chunk: Any, index: int, info: durably.StepInfo) -> None:
        hooked.append((chunk, index, info.attempt))

    seen: list[list[str]] = []

    @engine.workflow(name="assembled")
    def wf(ctx: durably.Context) -> Any:
        s = ctx.step_stream(
            "words", words, "a b c", assemble=assemble, replay=replay, on_chunk=hook
        )
        seen.append(list(s))
        ctx.step("after", lambda: 1)
        return s.result

    crash_at(engine, "1")
    with pytest.raises(Crash):
        engine.run(wf, run_id="a")
    engine.fault_hook = None
    assert engine.run(wf, run_id="a") == {"text": "a b c", "n": 3}
    assert seen == [["a", "b", "c"], ["a", "b", "c"]] and calls == ["a b c"]
    # The hook is for live chunks only: the replay did not call it again.
    assert hooked == [("a", 0, 1), ("b", 1, 1), ("c", 2, 1)]
    assert json.loads(engine.history("a")[0].output or "") == {"text": "a b c", "n": 3}


def test_changed_inputs_raise_nondeterminism(engine: durably.Engine) -> None:
    n = {"value": 2}

    def count(k: int) -> Iterator[int]:
        yield from range(k)

    @engine.workflow(name="nd")
    def wf(ctx: durably.Context) -> Any:
        out = list(ctx.step_stream("count", count, n["value"]))
        ctx.step("after", lambda: 1)
        return out

    crash_at(engine, "1")
    with pytest.raises(Crash):
        engine.run(wf, run_id="nd")
    engine.fault_hook = None
    n["value"] = 3
    with pytest.raises(durably.NonDeterminism, match=r"step 0: history has 'count'"):
        engine.run(wf, run_id="nd")
    assert engine.get_run("nd").status == "blocked"


def test_a_retry_before_the_first_chunk_is_a_fresh_series(engine: durably.Engine) -> None:
    infos: list[durably.StepInfo] = []
    hooked: list[tuple[int, int]] = []

    @durably.step(retries=3, backoff=0.0)
    def flaky(idempotency_key: str) -> Iterator[str]:
        info = durably.current_step()
        assert info is not None and info.idempotency_key == idempotency_key
        infos.append(info)
        if info.attempt < 3:
            raise ConnectionError("the provider refused the stream")
        yield "x"
        yield "y"

    @engine.workflow(name="retry")
    def wf(ctx: durably.Context) -> list[str]:
        hook = lambda c, i, info: hooked.append((info.attempt, i))  # noqa: E731
        return list(ctx.step_stream("flaky", flaky, on_chunk=hook))

    assert engine.run(wf, run_id="r") == ["x", "y"]
    assert [i.attempt for i in infos] == [1, 2, 3]
    assert len({i.idempotency_key for i in infos}) == 1
    assert hooked == [(3, 0), (3, 1)]
    assert engine.history("r")[0].attempts == 3
    kinds = [e.kind for e in engine.events("r").events]
    assert kinds.count("step.retried") == 2


def test_a_failure_after_a_chunk_is_final_and_replays(engine: durably.Engine) -> None:
    calls: list[int] = []

    @durably.step(retries=5, backoff=0.0)
    def breaks() -> Iterator[str]:
        calls.append(1)
        yield "partial"
        raise ConnectionError("connection reset mid-stream")

    seen: list[list[str]] = []

    @engine.workflow(name="breaks")
    def wf(ctx: durably.Context) -> str:
        got: list[str] = []
        seen.append(got)
        try:
            for c in ctx.step_stream("breaks", breaks):
                got.append(c)
        except durably.StepFailed as exc:
            return f"{exc.type_name}: {exc.message}"
        return "no failure"

    expected = "ConnectionError: connection reset mid-stream"
    assert engine.run(wf, run_id="b") == expected
    assert calls == [1]  # the caller had a chunk: no retry splices a second series in
    rec = engine.history("b")[0]
    assert (rec.status, rec.error_type, rec.attempts) == ("failed", "ConnectionError", 1)
    assert seen == [["partial"]]


def test_failed_stream_replays_the_failure(engine: durably.Engine) -> None:
    calls: list[int] = []

    def fails() -> Iterator[str]:
        calls.append(1)
        raise ValueError("no stream today")
        yield "never"

    @engine.workflow(name="fails")
    def wf(ctx: durably.Context) -> str:
        try:
            list(ctx.step_stream("fails", fails))
        except durably.StepFailed as exc:
            out = exc.message
        ctx.step("after", lambda: 1)
        return out

    crash_at(engine, "1")
    with pytest.raises(Crash):
        engine.run(wf, run_id="f")
    engine.fault_hook = None
    assert engine.run(wf, run_id="f") == "no stream today"
    assert calls == [1]


def test_async_generator_and_sync_generator_in_an_async_workflow(
    any_engine: durably.Engine,
) -> None:
    engine = any_engine
    calls: list[str] = []
    seen: list[Any] = []

    async def agen(n: int) -> AsyncIterator[dict[str, Any]]:
        calls.append("async")
        for i in range(n):
            await asyncio.sleep(0)
            info = durably.current_step()
            assert info is not None
            yield {"i": i, "pos": info.position}

    def sgen(n: int) -> Iterator[dict[str, Any]]:
        calls.append("sync")
        for i in range(n):
            info = durably.current_step()
            assert info is not None
            yield {"i": i, "pos": info.position, "thread": threading.current_thread().name}

    async def branch(ctx: durably.AsyncContext, n: int) -> list[Any]:
        return [c async for c in ctx.step_stream("b", agen, n)]

    @engine.workflow(name="astream")
    async def wf(ctx: durably.AsyncContext) -> Any:
        a = [c async for c in ctx.step_stream("a", agen, 2)]
        async with ctx.step_stream("s", sgen, 2) as s:
            b = [c async for c in s]
        g = await ctx.gather(branch(ctx, 1), branch(ctx, 2))
        out = {"a": a, "s": b, "g": g, "result": s.result}
        seen.append(out)
        await ctx.step("after", lambda: 1)
        return out

    crash_at(engine, "3")
    with pytest.raises(Crash):
        engine.run(wf, run_id="as")
    engine.fault_hook = None
    result = engine.run(wf, run_id="as")
    assert calls == ["async", "sync", "async", "async"]
    assert seen[0] == seen[1] == result
    assert [c["pos"] for c in result["a"]] == ["0", "0"]
    assert result["s"] == result["result"]
    # A sync generator of an async workflow is pulled in a step thread.
    assert all(c["thread"].startswith("durably-step") for c in result["s"])
    assert result["g"] == [
        [{"i": 0, "pos": "2.0.0"}],
        [{"i": 0, "pos": "2.1.0"}, {"i": 1, "pos": "2.1.0"}],
    ]


def test_async_retry_and_timeout(engine: durably.Engine) -> None:
    attempts: list[int] = []

    @durably.step(retries=1, backoff=0.0, timeout_s=0.3)
    async def slow_then_fast() -> AsyncIterator[str]:
        info = durably.current_step()
        assert info is not None
        attempts.append(info.attempt)
        if info.attempt == 1:
            await asyncio.sleep(60)  # past timeout_s before the first chunk: retried
        yield "ok"

    @engine.workflow(name="atimeout")
    async def wf(ctx: durably.AsyncContext) -> list[str]:
        return [c async for c in ctx.step_stream("slow", slow_then_fast)]

    started = time.monotonic()
    assert engine.run(wf, run_id="t") == ["ok"]
    assert time.monotonic() - started < 30  # the timeout cut the 60 s attempt short
    assert attempts == [1, 2]


def test_early_stop_records_what_was_consumed(engine: durably.Engine) -> None:
    closed: list[str] = []
    calls: list[int] = []

    def endless(tag: str) -> Iterator[str]:
        calls.append(1)
        try:
            i = 0
            while True:
                yield f"{tag}{i}"
                i += 1
        finally:
            closed.append(tag)  # the provider's stream is released at the stop

    seen: list[Any] = []

    @engine.workflow(name="early")
    def wf(ctx: durably.Context) -> Any:
        got: dict[str, Any] = {}
        s = ctx.step_stream("brk", endless, "b")
        for c in s:
            if c == "b2":
                break
        with ctx.step_stream("with", endless, "w") as w:
            got["with"] = [next(w), next(w)]
        got["with_result"] = w.result
        c = ctx.step_stream("close", endless, "c")
        next(c)
        c.close()
        got["close"] = (c.result, list(c))
        ctx.step_stream("never", endless, "n")  # never iterated: nothing is called
        ctx.step("after", lambda: 1)  # ends "never" first (recorded: nothing consumed)
        got["brk"] = s.result
        seen.append(got)
        ctx.step("later", lambda: 2)
        return got

    crash_at(engine, "5")
    with pytest.raises(Crash):
        engine.run(wf, run_id="e")
    engine.fault_hook = None
    result = engine.run(wf, run_id="e")
    assert seen[0] == seen[1] == result
    assert result == {
        "brk": ["b0", "b1", "b2"],
        "with": ["w0", "w1"],
        "with_result": ["w0", "w1"],
        "close": (["c0"], []),
    }
    assert calls == [1, 1, 1]  # the replay called nothing; "never" was never called
    # The break's stream ended when the next streamed step took its position.
    assert closed == ["b", "w", "c"]
    outputs = {r.name: json.loads(r.output or "null") for r in engine.history("e")}
    assert outputs["never"] == []


def test_workflow_end_records_a_stream_left_open(engine: durably.Engine) -> None:
    @engine.workflow(name="left")
    def wf(ctx: durably.Context) -> str:
        s = ctx.step_stream("s", lambda: iter("abc"))
        next(s)
        return "returned"

    assert engine.run(wf, run_id="l") == "returned"
    rec = engine.history("l")[0]
    assert (rec.status, json.loads(rec.output or "")) == ("ok", ["a"])


def test_a_recording_call_inside_the_loop_ends_the_stream(engine: durably.Engine) -> None:
    @engine.workflow(name="inside")
    def wf(ctx: durably.Context) -> None:
        for c in ctx.step_stream("s", lambda: iter("abc")):
            ctx.step("per_chunk", lambda x: x, c)

    with pytest.raises(durably.ConfigError, match=r"ended by the recording call at 1"):
        engine.run(wf, run_id="i")
    assert engine.get_run("i").status == "blocked"
    assert json.loads(engine.history("i")[0].output or "") == ["a"]


def test_bad_chunks_and_bounds_block_the_run(
    engine: durably.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    @engine.workflow(name="unencodable")
    def bad(ctx: durably.Context) -> list[Any]:
        return list(ctx.step_stream("s", lambda: iter([object()])))

    with pytest.raises(durably.SerializationError, match=r"streamed step 0 's' chunk"):
        engine.run(bad, run_id="u")
    assert engine.get_run("u").status == "blocked"

    @engine.workflow(name="notiter")
    def notiter(ctx: durably.Context) -> list[Any]:
        return list(ctx.step_stream("s", lambda: 42))

    with pytest.raises(durably.ConfigError, match=r"returned int.*not an iterator"):
        engine.run(notiter, run_id="n")

    async def agen() -> AsyncIterator[int]:
        yield 1

    @engine.workflow(name="asyncinsync")
    def asyncinsync(ctx: durably.Context) -> list[Any]:
        return list(ctx.step_stream("s", agen))

    with pytest.raises(durably.ConfigError, match=r"is async: stream it from an async"):
        engine.run(asyncinsync, run_id="x")

    monkeypatch.setattr(durably.features.stream, "STREAM_CHUNKS_MAX", 3)

    @engine.workflow(name="many")
    def many(ctx: durably.Context) -> list[Any]:
        return list(ctx.step_stream("s", lambda: iter(range(10))))

    with pytest.raises(durably.ConfigError, match=r"more than 3 chunks"):
        engine.run(many, run_id="m")
    assert engine.get_run("m").status == "blocked"


_SCRIPT = """
import json, os, signal, sqlite3, sys
import durably

journal, world = sys.argv[1], sys.argv[2]
engine = durably.Engine(journal)

def chunks(n, idempotency_key):
    info = durably.current_step()
    with sqlite3.connect(world) as w:
        w.execute("CREATE TABLE IF NOT EXISTS calls (key TEXT, token INTEGER)")
        w.execute("INSERT INTO calls VALUES (?, ?)", (idempotency_key, info.fencing_token))
        first = w.execute("SELECT count(*) FROM calls").fetchone()[0] == 1
    for i in range(n):
        if first and i == 2:
            os.kill(os.getpid(), signal.SIGKILL)  # dies mid-stream, two chunks out
        yield f"c{i}"

@engine.workflow(name="killed")
def wf(ctx):
    got = []
    for c in ctx.step_stream("stream", chunks, 4):
        got.append(c)
        print(json.dumps({"chunk": c}), flush=True)
    return got

print(json.dumps({"result": engine.run(wf, run_id="k1")}), flush=True)
"""


def test_sigkill_mid_stream_reruns_it_and_records_once(tmp_path: Path) -> None:
    script = tmp_path / "agent.py"
    script.write_text(textwrap.dedent(_SCRIPT))
    world = tmp_path / "world.db"
    journal = f"sqlite:///{tmp_path / 'j.db'}"
    args = [sys.executable, str(script), journal, str(world)]
    first = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert first.returncode == -signal.SIGKILL, first.stderr
    # The caller got the first chunks live, before the stream ended.
    assert [json.loads(line) for line in first.stdout.splitlines()] == [
        {"chunk": "c0"},
        {"chunk": "c1"},
    ]
    second = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert second.returncode == 0, second.stderr
    lines = [json.loads(line) for line in second.stdout.splitlines()]
    assert lines[-1] == {"result": ["c0", "c1", "c2", "c3"]}
    with sqlite3.connect(world) as w:
        calls = w.execute("SELECT key, token FROM calls").fetchall()
    assert len(calls) == 2 and calls[0][0] == calls[1][0] and calls[1][1] > calls[0][1]
    engine = durably.Engine(journal)
    try:
        history = engine.history("k1")
        assert [(r.position, r.status) for r in history] == [("0", "ok")]  # recorded once
        assert json.loads(history[0].output or "") == ["c0", "c1", "c2", "c3"]
        assert engine.get_run("k1").status == "completed"
    finally:
        engine.close()
    third = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert third.returncode == 0, third.stderr
    with sqlite3.connect(world) as w:
        assert w.execute("SELECT count(*) FROM calls").fetchone()[0] == 2  # not called again


def test_replay_check_replays_streams_without_calling(engine: durably.Engine) -> None:
    from durably.replaycheck import check_runs

    calls: list[str] = []

    def words(text: str) -> Iterator[str]:
        calls.append(text)
        yield from text.split()

    @engine.workflow(name="checked")
    def wf(ctx: durably.Context) -> list[str]:
        whole = list(ctx.step_stream("whole", words, "a b c"))
        for w in ctx.step_stream("early", words, "x y z"):
            if w == "y":
                break
        return whole

    assert engine.run(wf, run_id="c") == ["a", "b", "c"]
    assert calls == ["a b c", "x y z"]
    report = check_runs(engine, [engine.get_run("c")])
    assert report.checked == 1 and report.findings == []
    assert calls == ["a b c", "x y z"]
    assert json.loads(engine.history("c")[1].output or "") == ["x", "y"]


def test_effect_stream_in_doubt_reruns_with_its_key_or_reconciles(
    engine: durably.Engine,
) -> None:
    """An ``effect=True`` stream records an intent first: a crash mid-stream leaves it in
    doubt, so the resume re-runs it with the same key (attempt 2, as its record says),
    or asks ``reconcile`` and streams what it returns like a replay."""
    infos: list[durably.StepInfo] = []

    @durably.step(effect=True)
    def keyed(idempotency_key: str) -> Iterator[str]:
        info = durably.current_step()
        assert info is not None
        infos.append(info)
        yield "k0"
        if len(infos) == 1:
            raise Crash("the process dies mid-stream")
        yield "k1"

    reconciled: list[str] = []
    calls: list[int] = []

    def reconcile(key: str) -> list[str]:
        reconciled.append(key)
        return ["r0", "r1"]

    @durably.step(reconcile=reconcile)
    def unkeyed() -> Iterator[str]:
        calls.append(1)
        yield "u0"
        raise Crash("the process dies mid-stream")

    @engine.workflow(name="effects")
    def wf(ctx: durably.Context) -> Any:
        return [list(ctx.step_stream("keyed", keyed)), list(ctx.step_stream("unkeyed", unkeyed))]

    with pytest.raises(Crash):
        engine.run(wf, run_id="fx")
    with pytest.raises(Crash):
        engine.run(wf, run_id="fx")
    assert engine.run(wf, run_id="fx") == [["k0", "k1"], ["r0", "r1"]]
    assert [i.attempt for i in infos] == [1, 2]
    assert infos[0].idempotency_key == infos[1].idempotency_key
    assert infos[1].fencing_token > infos[0].fencing_token
    assert calls == [1] and reconciled == [infos[0].idempotency_key[:-1] + "1"]
    keyed_rec, unkeyed_rec = engine.history("fx")
    assert (keyed_rec.status, keyed_rec.attempts) == ("ok", 2)
    assert json.loads(unkeyed_rec.output or "") == ["r0", "r1"]


def test_async_early_stop(engine: durably.Engine) -> None:
    closed: list[str] = []
    calls: list[str] = []

    async def endless(tag: str) -> AsyncIterator[str]:
        calls.append(tag)
        try:
            i = 0
            while True:
                await asyncio.sleep(0)
                yield f"{tag}{i}"
                i += 1
        finally:
            closed.append(tag)

    seen: list[Any] = []

    @engine.workflow(name="aearly")
    async def wf(ctx: durably.AsyncContext) -> Any:
        a = ctx.step_stream("aclose", endless, "a")
        first = await a.__anext__()
        await a.aclose()
        async with ctx.step_stream("with", endless, "w") as w:
            async for c in w:
                if c == "w1":
                    break
        b = ctx.step_stream("brk", endless, "b")
        async for _c in b:
            break
        await ctx.now()  # ends "brk" (its async iterator is left to the loop's finalizer)
        got = [first, a.result, w.result, b.result]
        seen.append(got)
        await ctx.step("after", lambda: 1)
        return got

    crash_at(engine, "4")
    with pytest.raises(Crash):
        engine.run(wf, run_id="ae")
    engine.fault_hook = None
    result = engine.run(wf, run_id="ae")
    assert seen[0] == seen[1] == result == ["a0", ["a0"], ["w0", "w1"], ["b0"]]
    assert calls == ["a", "w", "b"]
    assert closed[:2] == ["a", "w"]  # closed at once by aclose() and by async with


def test_an_error_in_on_chunk_reaches_the_caller_and_records_nothing(
    engine: durably.Engine,
) -> None:
    def hook(chunk: Any, index: int, info: durably.StepInfo) -> None:
        raise RuntimeError("the wrapper's event writer failed")

    @engine.workflow(name="hookfails")
    def wf(ctx: durably.Context) -> list[str]:
        return list(ctx.step_stream("s", lambda: iter("ab"), on_chunk=hook))

    with pytest.raises(durably.WorkflowFailed, match="event writer failed"):
        engine.run(wf, run_id="h")
    assert [r.position for r in engine.history("h")] == []


def test_deltas_are_bounded_per_attempt_and_never_made_on_replay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from durably import streaming

    monkeypatch.setattr(streaming, "MODEL_DELTAS_MAX", 3)
    engine = durably.Engine(f"sqlite:///{tmp_path / 'd.db'}")
    crash = [True]

    class Stop(BaseException):
        pass

    @engine.workflow(name="bounded")
    def bounded(ctx: durably.Context) -> str:
        out = "".join(ctx.step_stream("s", lambda: iter("abcdef"), deltas=lambda c: [{"text": c}]))
        if crash[0]:
            raise Stop
        return out

    try:
        with pytest.raises(Stop):
            engine.run(bounded, run_id="b")
        crash[0] = False
        assert engine.run(bounded, run_id="b") == "abcdef"
        assert engine.store.flush_stream(5)
        kinds = [(e.kind, e.data.get("text")) for e in engine.events("b").events]
        deltas = [t for k, t in kinds if k == "model.delta"]
        assert deltas == ["a", "b", "c"]  # bounded; the record holds all six
        assert sum(k == "model.restart" for k, _ in kinds) == 1  # the replay made none
    finally:
        engine.close()


@pytest.mark.parametrize("bad", [lambda c: [c], lambda c: [{"x": object()}], lambda c: 1 / 0])
def test_deltas_that_are_not_json_dicts_block_the_run(tmp_path: Path, bad: Any) -> None:
    engine = durably.Engine(f"sqlite:///{tmp_path / 'bad.db'}")

    @engine.workflow(name="bad_deltas")
    def bad_deltas(ctx: durably.Context) -> list[Any]:
        return list(ctx.step_stream("s", lambda: iter(["a"]), deltas=bad))

    try:
        with pytest.raises(durably.ConfigError, match="deltas"):
            engine.run(bad_deltas, run_id="b")
        assert engine.get_run("b").status == "blocked"
    finally:
        engine.close()
