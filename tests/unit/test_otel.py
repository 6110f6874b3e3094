"""``durably.otel``: spans per run and per step attempt, built from the real event stream
of real runs on both stores, read back through the OpenTelemetry SDK's in-memory
exporter."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import durably

try:
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import StatusCode
except ImportError:
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        raise  # CI installs the otel extra (make test): these tests must run there
    pytest.skip(
        "OpenTelemetry is not installed: pip install -e '.[otel]' (make test does)",
        allow_module_level=True,
    )

from durably.otel import export_run, follow_run

from .live_runs import running


class RateLimitError(Exception):
    """What a model API raises when called too often."""


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    yield tp
    tp.shutdown()


@pytest.fixture
def engine(journal_url: str) -> Iterator[durably.Engine]:
    e = durably.Engine(journal_url)
    yield e
    e.close()


def _agent(engine: durably.Engine, gate: threading.Event | None = None) -> durably.Workflow:
    calls: list[int] = []

    def plan() -> str:
        durably.usage(input_tokens=1000, output_tokens=200, cost_usd=0.25)
        return "p"

    @durably.step(retries=3, backoff=0)
    def call_model(prompt: str) -> str:
        calls.append(1)
        if len(calls) == 1:
            raise RateLimitError("429: slow down")
        return "answer"

    @durably.step(effect=True)
    def open_ticket(title: str, *, idempotency_key: str) -> str:
        if gate is not None:
            assert gate.wait(60)
        return "T-1"

    @engine.workflow(name="agent")
    def agent(ctx: durably.Context) -> str:
        ctx.step("plan", plan)
        ctx.emit("progress", {"done": 1})
        answer = ctx.step("call_model", call_model, "hi")
        return ctx.step("open_ticket", open_ticket, answer)

    return agent


def _wait_until(ready: Callable[[], bool]) -> None:
    """Poll ``ready`` until true (a run started in a thread may not exist yet)."""
    for _ in range(1200):
        try:
            if ready():
                return
        except durably.RunNotFound:
            pass
        time.sleep(0.05)
    raise AssertionError("not ready within 60 s")


def _by_name(spans: Any) -> dict[str, list[ReadableSpan]]:
    out: dict[str, list[ReadableSpan]] = {}
    for s in spans:
        out.setdefault(s.name, []).append(s)
    return out


def _check_agent_trace(spans: Any, run_id: str, key: str) -> None:
    named = _by_name(spans)
    (run,) = named["durably run agent"]
    assert run.attributes is not None and run.parent is None
    assert run.attributes["durably.run_id"] == run_id
    assert run.attributes["durably.workflow"] == "agent"
    assert run.attributes["durably.run.finished"] is True
    assert run.attributes["durably.run.status"] == "completed"
    assert [e.name for e in run.events if e.name == "progress"] == ["progress"]
    steps = [s for s in spans if s is not run]
    assert all(s.parent is not None and s.parent.span_id == run.context.span_id for s in steps)
    assert all(s.context.trace_id == run.context.trace_id for s in steps)
    (plan,) = named["durably step plan"]
    assert plan.attributes is not None
    assert plan.attributes["durably.position"] == "0"
    assert plan.attributes["durably.usage.tokens"] == 1200
    assert plan.attributes["durably.usage.cost_usd"] == 0.25
    assert plan.attributes["durably.usage.input_tokens"] == 1000
    assert plan.attributes["durably.usage.output_tokens"] == 200
    first, second = sorted(named["durably step call_model"], key=lambda s: s.start_time or 0)
    assert first.attributes is not None and second.attributes is not None
    assert first.attributes["durably.step.attempt"] == 1
    assert str(first.attributes["error.type"]).endswith("RateLimitError")
    assert first.status.status_code == StatusCode.ERROR
    assert first.status.description == "429: slow down"
    assert second.attributes["durably.step.attempt"] == 2
    assert second.status.status_code == StatusCode.UNSET
    assert (first.end_time or 0) <= (second.start_time or 0)
    (ticket,) = named["durably step open_ticket"]
    assert ticket.attributes is not None
    assert ticket.attributes["durably.idempotency_key"] == key
    assert ticket.attributes["durably.position"] == "2"
    for s in steps:
        assert (run.start_time or 0) <= (s.start_time or 0) <= (s.end_time or 0)
        assert (s.end_time or 0) <= (run.end_time or 0)


def test_export_run_of_a_completed_run(
    engine: durably.Engine, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    engine.run(_agent(engine), run_id="r1")
    cursor = export_run(engine, "r1", tracer_provider=provider)
    assert cursor == engine.events("r1").cursor and cursor > 0
    spans = exporter.get_finished_spans()
    assert len(spans) == 5  # the run, plan, two attempts of call_model, open_ticket
    _check_agent_trace(spans, "r1", engine.get_run("r1").key("2"))


def test_a_failed_run_and_step_are_errors(
    engine: durably.Engine, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    def charge() -> None:
        raise ValueError("card declined")

    @engine.workflow(name="pay")
    def pay(ctx: durably.Context) -> None:
        ctx.step("charge", charge)

    with pytest.raises(durably.WorkflowFailed):
        engine.run(pay, run_id="f1")
    export_run(engine, "f1", tracer_provider=provider)
    named = _by_name(exporter.get_finished_spans())
    (run,), (step,) = named["durably run pay"], named["durably step charge"]
    assert run.attributes is not None and step.attributes is not None
    assert run.status.status_code == StatusCode.ERROR
    assert run.attributes["error.type"] == "ValueError"
    assert run.attributes["durably.run.status"] == "failed"
    assert step.status.status_code == StatusCode.ERROR
    assert step.status.description == "card declined"
    assert step.attributes["error.type"] == "ValueError"


def test_follow_run_exports_live_and_resumes_from_its_cursor(
    engine: durably.Engine, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    gate = threading.Event()
    wf = _agent(engine, gate)
    with running(engine, wf, "live", gate):
        # A follower that stops early: it exported the steps committed so far.
        _wait_until(lambda: any(e.kind == "step.completed" for e in engine.events("live").events))
        early = export_run(engine, "live", tracer_provider=provider)
        before = {s.name for s in exporter.get_finished_spans()}
        assert "durably step plan" in before and "durably step open_ticket" not in before
        exporter.clear()
        gate.set()
        last = follow_run(engine, "live", tracer_provider=provider, after=early)
    assert last == engine.events("live").cursor
    spans = exporter.get_finished_spans()
    # Resumed after its cursor: only what came later, each once.
    assert "durably step plan" not in {s.name for s in spans}
    assert len([s for s in spans if s.name == "durably step open_ticket"]) == 1


def test_an_unfinished_run_ends_at_its_latest_event(
    engine: durably.Engine, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    gate = threading.Event()
    wf = _agent(engine, gate)
    with running(engine, wf, "open", gate):
        _wait_until(lambda: bool(engine.history("open")))
        export_run(engine, "open", tracer_provider=provider)
    (run,) = _by_name(exporter.get_finished_spans())["durably run agent"]
    assert run.attributes is not None and run.attributes["durably.run.finished"] is False


def test_import_durably_does_not_import_opentelemetry() -> None:
    code = "import sys, durably, durably.why; print('opentelemetry' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
