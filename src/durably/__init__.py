"""durably: durable execution for AI agents.

A run's steps (model calls, tool calls, clock and random reads) are recorded in a journal
outside the process; after a crash the same code runs again from the top, recorded steps
return their stored results, and execution goes live at the first unrecorded step. See
README.md and docs/ for the guarantees.
"""

from __future__ import annotations

import importlib

# Not typing.TYPE_CHECKING: importing typing alone costs a fifth of a bare start.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .approvals import Decision, PendingApproval
    from .budget import Budget, Spend
    from .clock import Clock, FakeClock, SystemClock
    from .context import AsyncContext, Context, current_context
    from .current import StepInfo, current_step
    from .engine import Engine, Handle, Workflow
    from .engine.retention import PruneReport
    from .errors import (
        ApprovalAlreadyDecided,
        ApprovalMismatch,
        ApprovalNotFound,
        BudgetExceeded,
        Cancelled,
        CompensationFailed,
        ConfigError,
        DurablyError,
        HistoryTooLarge,
        IdempotencyKeyInFlight,
        IdempotencyKeyReused,
        NonDeterminism,
        NotADurablyDatabase,
        RunBlocked,
        RunConflict,
        RunFinished,
        RunInDoubt,
        RunLeased,
        RunNotFinished,
        RunNotFound,
        RunParked,
        RunPruned,
        RunQuarantined,
        RunRedacted,
        SerializationError,
        SignalQueueFull,
        StaleLease,
        StepFailed,
        StepTimeout,
        StoreBusy,
        StoreDiskFull,
        StoreError,
        StoreUnavailable,
        ToolRejected,
        WorkflowFailed,
        WorkflowNotRegistered,
    )
    from .events import Event, EventPage, Follow
    from .history import RunRecord, StepRecord
    from .inspect.why import Explanation, Fact, explain
    from .naming import step_name
    from .replay.kernel import NOT_DONE, FaultStepInfo
    from .runlist import LiveWorker, RunPage
    from .runtime.branches import Branches
    from .steps import step, usage
    from .store.base import Generation
    from .store.retained import Redaction, Tombstone
    from .streaming import AsyncStepStream, StepStream
    from .tools import tool

# Every public name is imported on first use (PEP 562), never by ``import durably``
# itself: a process that only resumes a run, a worker, or the CLI's ``--help`` pays for
# the rooms it touches, not for all of them (issue 28: ``import durably`` was ~13x a bare
# interpreter start). The module each name comes from:
_LAZY: dict[str, str] = {
    "Decision": ".approvals",
    "PendingApproval": ".approvals",
    "PruneReport": ".engine.retention",
    "Redaction": ".store.retained",
    "Tombstone": ".store.retained",
    "Budget": ".budget",
    "Spend": ".budget",
    "Clock": ".clock",
    "FakeClock": ".clock",
    "SystemClock": ".clock",
    "AsyncContext": ".context",
    "Context": ".context",
    "current_context": ".context",
    "StepInfo": ".current",
    "current_step": ".current",
    "Engine": ".engine",
    "Generation": ".store.base",
    "Handle": ".engine",
    "Workflow": ".engine",
    "ApprovalAlreadyDecided": ".errors",
    "ApprovalMismatch": ".errors",
    "ApprovalNotFound": ".errors",
    "BudgetExceeded": ".errors",
    "Cancelled": ".errors",
    "CompensationFailed": ".errors",
    "ConfigError": ".errors",
    "DurablyError": ".errors",
    "HistoryTooLarge": ".errors",
    "IdempotencyKeyInFlight": ".errors",
    "IdempotencyKeyReused": ".errors",
    "NonDeterminism": ".errors",
    "NotADurablyDatabase": ".errors",
    "RunBlocked": ".errors",
    "RunConflict": ".errors",
    "RunFinished": ".errors",
    "RunInDoubt": ".errors",
    "RunLeased": ".errors",
    "RunNotFinished": ".errors",
    "RunNotFound": ".errors",
    "RunParked": ".errors",
    "RunPruned": ".errors",
    "RunQuarantined": ".errors",
    "RunRedacted": ".errors",
    "SerializationError": ".errors",
    "SignalQueueFull": ".errors",
    "StaleLease": ".errors",
    "StepFailed": ".errors",
    "StepTimeout": ".errors",
    "StoreBusy": ".errors",
    "StoreDiskFull": ".errors",
    "StoreError": ".errors",
    "StoreUnavailable": ".errors",
    "ToolRejected": ".errors",
    "WorkflowFailed": ".errors",
    "WorkflowNotRegistered": ".errors",
    "Event": ".events",
    "EventPage": ".events",
    "Follow": ".events",
    "RunRecord": ".history",
    "StepRecord": ".history",
    "Explanation": ".inspect.why",
    "Fact": ".inspect.why",
    "explain": ".inspect.why",
    "step_name": ".naming",
    "NOT_DONE": ".replay.kernel",
    "FaultStepInfo": ".replay.kernel",
    "LiveWorker": ".runlist",
    "RunPage": ".runlist",
    "Branches": ".runtime.branches",
    "step": ".steps",
    "usage": ".steps",
    "AsyncStepStream": ".streaming",
    "StepStream": ".streaming",
    "tool": ".tools",
}


def __getattr__(name: str) -> Any:
    """Import the module a public name lives in on first use and keep the name here."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'durably' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__version__ = "0.1.0"

__all__ = [
    "NOT_DONE",
    "ApprovalAlreadyDecided",
    "ApprovalMismatch",
    "ApprovalNotFound",
    "AsyncContext",
    "AsyncStepStream",
    "Branches",
    "Budget",
    "BudgetExceeded",
    "Cancelled",
    "Clock",
    "CompensationFailed",
    "ConfigError",
    "Context",
    "Decision",
    "DurablyError",
    "Engine",
    "Event",
    "EventPage",
    "Explanation",
    "Fact",
    "FakeClock",
    "FaultStepInfo",
    "Follow",
    "Generation",
    "Handle",
    "HistoryTooLarge",
    "IdempotencyKeyInFlight",
    "IdempotencyKeyReused",
    "LiveWorker",
    "NonDeterminism",
    "NotADurablyDatabase",
    "PendingApproval",
    "PruneReport",
    "Redaction",
    "RunBlocked",
    "RunConflict",
    "RunFinished",
    "RunInDoubt",
    "RunLeased",
    "RunNotFinished",
    "RunNotFound",
    "RunPage",
    "RunParked",
    "RunPruned",
    "RunQuarantined",
    "RunRecord",
    "RunRedacted",
    "SerializationError",
    "SignalQueueFull",
    "Spend",
    "StaleLease",
    "StepFailed",
    "StepInfo",
    "StepRecord",
    "StepStream",
    "StepTimeout",
    "StoreBusy",
    "StoreDiskFull",
    "StoreError",
    "StoreUnavailable",
    "SystemClock",
    "Tombstone",
    "ToolRejected",
    "Workflow",
    "WorkflowFailed",
    "WorkflowNotRegistered",
    "__version__",
    "current_context",
    "current_step",
    "explain",
    "step",
    "step_name",
    "tool",
    "usage",
]
