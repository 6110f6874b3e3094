"""``durably.explain``: why a run is where it is and what to do, as data.

:func:`explain` reads the facts (:mod:`.why_facts`: what the journal says, structured)
and words them (:mod:`.why_sentences`: the sentence and its JSON facts), returning an
:class:`Explanation`, what ``durably runs why`` prints. The old module path
``durably.why`` re-exports these names.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from .why_facts import gather
from .why_sentences import clock_text, explain_facts

if TYPE_CHECKING:
    from ..engine import Engine


@dataclass(frozen=True, slots=True)
class Fact:
    """One fact an explanation rests on, for people: a label (``"lease expires at"``)
    and its value as text (``"2026-12-01 10:00:00 UTC"``)."""

    label: str
    text: str


@dataclass(frozen=True, slots=True)
class Explanation:
    """Why a run is where it is (``durably.explain``): the run, its status, the state
    the sentence words (a row of docs/why.md: ``orphaned``, ``signal``, ...), the
    headline sentence, and the facts it rests on, as text (``facts``) and as JSON
    values (``to_json``). The sentence quotes journal text as it is: escape it for a
    terminal or a page."""

    run_id: str
    status: str
    state: str
    sentence: str
    facts: list[Fact]
    values: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """Exactly what ``durably runs why --json`` prints: ``{"state", "sentence",
        "run_id", "status", "queue", ...}`` (the keys of each state: docs/why.md)."""
        return {"state": self.state, "sentence": self.sentence, **self.values}


def explain(engine: Engine, run_id: str, *, now: float | None = None) -> Explanation:
    """Why run ``run_id`` is where it is and what to do, as data: what ``durably runs
    why`` prints. ``now`` (epoch seconds) defaults to the engine's clock. Reads only
    through the engine's public methods; raises ``RunNotFound`` for an unknown run, and
    ``ConfigError`` for an ``engine`` that is no ``durably.Engine`` or a ``now`` that is
    no time."""
    if not all(hasattr(engine, a) for a in ("clock", "get_run", "history", "events")):
        raise ConfigError(
            "durably.explain takes a durably.Engine (durably.Engine(url)) and a run id, got"
            f" {type(engine).__module__}.{type(engine).__qualname__} for the engine"
        )
    if now is not None and (
        isinstance(now, bool) or not isinstance(now, int | float) or not math.isfinite(now)
    ):
        raise ConfigError(
            f"durably.explain: now must be None (the engine's clock) or a time in epoch"
            f" seconds, got {type(now).__name__} {now!r:.40}"
        )
    at = engine.clock.time() if now is None else now
    why = explain_facts(gather(engine, run_id, at))
    values = why.facts
    return Explanation(
        run_id=str(values.get("run_id", run_id)),
        status=str(values.get("status", "")),
        state=why.state,
        sentence=why.sentence,
        facts=facts_of(why.facts),
        values=dict(why.facts),
    )


# Facts whose value is a time (epoch seconds), said as one.
_TIME_FACTS = frozenset(
    {
        "queued_at",
        "lease_expires_at",
        "finished_at",
        "cancel_requested_at",
        "wake_at",
        "since",
        "deadline",
        "expires_at",
    }
)


def facts_of(values: dict[str, Any]) -> list[Fact]:
    """The JSON facts of a sentence as labelled text, in their order; facts without a
    value (None) are left out, and ``run_id``/``status`` are the explanation's own."""
    out: list[Fact] = []
    for key, value in values.items():
        if value is None or key in ("run_id", "status"):
            continue
        out.append(Fact(key.replace("_", " "), _fact_text(key, value)))
    return out


def _fact_text(key: str, value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if key in _TIME_FACTS and isinstance(value, (int, float)):
        return clock_text(float(value))
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)
