"""The old module path of ``durably runs why`` (``durably.why``), kept working: the code
lives in :mod:`durably.inspect.why` (the entry, :func:`explain`), split into
:mod:`durably.inspect.why_facts` (what the journal says, structured) and
:mod:`durably.inspect.why_sentences` (the words). Import from there in new code."""

from __future__ import annotations

from .inspect.why import Explanation, Fact, explain, facts_of
from .inspect.why_facts import (
    EVENTS_SCAN_MAX,
    QUEUE_SCAN_MAX,
    Facts,
    QueueView,
    StepActivity,
    blocked_type,
    gather,
    last_error_of,
    orphaned_row,
    park_kind,
    queue_view,
    read_events,
    step_activity,
)
from .inspect.why_sentences import (
    BUDGET_EXCEEDED,
    QUOTE_CHARS_MAX,
    STATES,
    Why,
    clock_text,
    explain_facts,
    quote,
    seconds,
)

__all__ = [
    "BUDGET_EXCEEDED",
    "EVENTS_SCAN_MAX",
    "QUEUE_SCAN_MAX",
    "QUOTE_CHARS_MAX",
    "STATES",
    "Explanation",
    "Fact",
    "Facts",
    "QueueView",
    "StepActivity",
    "Why",
    "blocked_type",
    "clock_text",
    "explain",
    "explain_facts",
    "facts_of",
    "gather",
    "last_error_of",
    "orphaned_row",
    "park_kind",
    "queue_view",
    "quote",
    "read_events",
    "seconds",
    "step_activity",
]
