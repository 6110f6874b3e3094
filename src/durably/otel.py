"""OpenTelemetry traces of runs, built from the run's event stream (``pip install
'durably[otel]'``).

One span per run and one per step attempt, children of the run's span, with the times the
stream recorded (so a trace exported after the fact, or by another process, shows when
things really happened). Attributes: ``durably.run_id``, ``durably.workflow``,
``durably.position``, ``durably.step.name``, ``durably.step.attempt``,
``durably.idempotency_key``, ``durably.usage.tokens``, ``durably.usage.cost_usd`` (and
``durably.usage.input_tokens`` / ``output_tokens`` when reported), and on failures
``error.type`` with the span status ERROR and the message as its description.
Lease changes and ``ctx.emit`` events become span events of the run's span.

:func:`export_run` exports what the stream holds now; :func:`follow_run` follows a live
run and exports each step as it is recorded, returning when the run finishes. Only steps
that ran live have events: steps replayed from the journal did no work and get no span.
``import durably`` never imports this module (nor OpenTelemetry).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

try:
    from opentelemetry import trace
    from opentelemetry.trace import Span, Status, StatusCode, Tracer, TracerProvider
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "durably.otel needs OpenTelemetry: pip install 'durably[otel]'"
        " (opentelemetry-api and opentelemetry-sdk)"
    ) from exc

from . import events as k
from .events import Event

if TYPE_CHECKING:
    from .engine import Engine

__all__ = ["RunTracer", "export_run", "follow_run"]

TRACER_NAME = "durably"
PAGE_EVENTS = 1000
_RUN_END = {
    k.RUN_COMPLETED: None,
    k.RUN_FAILED: "failed",
    k.RUN_CANCELLED: "cancelled",
    k.RUN_BLOCKED: "blocked",
    k.RUN_IN_DOUBT: "in_doubt",
    k.RUN_QUARANTINED: "quarantined",
    k.RUN_PARKED: None,
}
_SPAN_EVENTS = (k.LEASE_TAKEN, k.LEASE_LOST, k.LEASE_EXPIRED, k.RUN_RESUMED, k.USER)


def export_run(
    engine: Engine, run_id: str, tracer_provider: TracerProvider | None = None, after: int = 0
) -> int:
    """Export the spans of ``run_id``'s events after cursor ``after`` (the global tracer
    provider unless one is given); returns the cursor read up to.

    A run that is still going gets a run span ending at its latest event, with
    ``durably.run.finished`` false; steps still in flight get no span yet.
    """
    tracer = RunTracer(engine, run_id, tracer_provider)
    cursor = after
    while True:
        page = engine.events(run_id, after=cursor, limit=PAGE_EVENTS)
        tracer.feed(page.events)
        if page.cursor == cursor or not page.events:
            break
        cursor = page.cursor
    tracer.close()
    return cursor


def follow_run(
    engine: Engine,
    run_id: str,
    tracer_provider: TracerProvider | None = None,
    after: int = 0,
    poll_s: float = k.FOLLOW_POLL_S_DEFAULT,
) -> int:
    """Follow ``run_id`` live, exporting each step's span as its events commit, and the
    run's span once the run finishes; returns the last cursor (pass it as ``after`` to
    resume after a disconnect without exporting a span twice)."""
    tracer = RunTracer(engine, run_id, tracer_provider)
    follow = engine.follow(run_id, after=after, poll_s=poll_s)
    for event in follow:
        tracer.feed((event,))
    tracer.close()
    return follow.cursor


class RunTracer:
    """Turns one run's events into spans, as they come (:meth:`feed`), ending the run's
    span at its last event (:meth:`close`)."""

    def __init__(
        self, engine: Engine, run_id: str, tracer_provider: TracerProvider | None = None
    ) -> None:
        run = engine.get_run(run_id)
        self.run_id = run_id
        self.workflow = run.workflow
        self.tracer: Tracer = trace.get_tracer(TRACER_NAME, tracer_provider=tracer_provider)
        self.run_span: Span | None = None
        # position -> (attempt, its start time, the step.started data) of the attempt running
        self.started: dict[str, tuple[object, float, dict[str, Any]]] = {}
        self.last_at: float | None = None
        self.finished = False

    def feed(self, events: Iterable[Event]) -> None:
        """Export what ``events`` (in cursor order) complete."""
        for event in events:
            self._one(event)

    def close(self) -> None:
        """End the run's span: at the run's final event, else at its latest event."""
        if self.run_span is None or not self.run_span.is_recording():
            return
        self.run_span.set_attribute("durably.run.finished", self.finished)
        self.run_span.end(end_time=_ns(self.last_at or 0.0))

    def _one(self, event: Event) -> None:
        span = self._run_span(event)
        self.last_at = event.at
        kind, data = event.kind, event.data
        if kind == k.STEP_STARTED and event.position is not None:
            self.started[event.position] = (data.get("attempt"), event.at, data)
        elif kind in (k.STEP_COMPLETED, k.STEP_FAILED, k.STEP_RETRIED):
            self._step_span(span, event)
        elif kind in _SPAN_EVENTS:
            name = f"durably.{kind}" if kind != k.USER else str(data.get("kind", "user"))
            span.add_event(name, _flat(data, "durably."), timestamp=_ns(event.at))
        elif kind in _RUN_END:
            span.set_attribute("durably.run.status", kind.removeprefix("run."))
            if kind != k.RUN_PARKED:
                self.finished = kind in (k.RUN_COMPLETED, k.RUN_FAILED, k.RUN_CANCELLED)
            if _RUN_END[kind] is not None:
                _set_error(span, data)

    def _run_span(self, event: Event) -> Span:
        if self.run_span is None:
            self.run_span = self.tracer.start_span(
                f"durably run {self.workflow}",
                attributes={"durably.run_id": self.run_id, "durably.workflow": self.workflow},
                start_time=_ns(event.at),
            )
        return self.run_span

    def _step_span(self, parent: Span, event: Event) -> None:
        data = event.data
        pos = event.position or "?"
        attempt = data.get("attempt")
        began = self.started.pop(pos, None)
        # step.started is stream-only and may be lost in a crash: the step's duration
        # then dates its start.
        if began is not None and began[0] == attempt:
            start, before = began[1], began[2]
        else:
            start, before = event.at - _num(data.get("duration_ms")) / 1000, {}
        if event.kind == k.STEP_RETRIED and isinstance(attempt, int):
            # The next attempt starts after the backoff.
            self.started[pos] = (attempt + 1, event.at + _num(data.get("delay_s")), before)
        attrs: dict[str, Any] = {
            "durably.run_id": self.run_id,
            "durably.workflow": self.workflow,
            "durably.position": pos,
            "durably.step.name": str(data.get("name", "?")),
        }
        for field, attr in (
            ("attempt", "durably.step.attempt"),
            ("key", "durably.idempotency_key"),
            ("tokens", "durably.usage.tokens"),
            ("cost_usd", "durably.usage.cost_usd"),
            ("input_tokens", "durably.usage.input_tokens"),
            ("output_tokens", "durably.usage.output_tokens"),
            ("delay_s", "durably.retry.delay_s"),
        ):
            value = data.get(field, before.get(field))
            if isinstance(value, str | int | float) and not isinstance(value, bool):
                attrs[attr] = value
        span = self.tracer.start_span(
            f"durably step {attrs['durably.step.name']}",
            context=trace.set_span_in_context(parent),
            attributes=attrs,
            start_time=_ns(min(start, event.at)),
        )
        if event.kind == k.STEP_RETRIED:
            span.set_attribute("durably.step.retried", True)
        if event.kind in (k.STEP_FAILED, k.STEP_RETRIED):
            _set_error(span, data)
        span.end(end_time=_ns(event.at))


def _set_error(span: Span, data: dict[str, Any]) -> None:
    etype = data.get("error_type")
    message = data.get("error_message", data.get("reason"))
    if isinstance(etype, str):
        span.set_attribute("error.type", etype)
    text = message if isinstance(message, str) else None
    span.set_status(Status(StatusCode.ERROR, text))


def _flat(data: dict[str, Any], prefix: str) -> dict[str, Any]:
    """Event data as span-event attributes: scalars as they are, the rest as JSON text."""
    import json

    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, str | int | float | bool):
            out[prefix + key] = value
        elif value is not None:
            out[prefix + key] = json.dumps(value, sort_keys=True, default=str)
    return out


def _num(value: object) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _ns(t: float) -> int:
    return int(t * 1_000_000_000)
