"""durably: durable execution for AI agents.

A run's steps (model calls, tool calls, clock and random reads) are recorded in a journal
outside the process; after a crash the same code runs again from the top, recorded steps
return their stored results, and execution goes live at the first unrecorded step. See
README.md and docs/ for the guarantees.
"""

from __future__ import annotations

from .approvals import Decision, PendingApproval
from .budget import Budget, Spend
from .clock import Clock, FakeClock, SystemClock
from .context import AsyncContext, Context, current_context
from .current import StepInfo, current_step
from .engine import Engine, Handle, Workflow
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
    RunNotFound,
    RunParked,
    RunQuarantined,
    SerializationError,
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
from .streaming import AsyncStepStream, StepStream
from .tools import tool

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
    "Handle",
    "HistoryTooLarge",
    "IdempotencyKeyInFlight",
    "IdempotencyKeyReused",
    "LiveWorker",
    "NonDeterminism",
    "NotADurablyDatabase",
    "PendingApproval",
    "RunBlocked",
    "RunConflict",
    "RunFinished",
    "RunInDoubt",
    "RunLeased",
    "RunNotFound",
    "RunPage",
    "RunParked",
    "RunQuarantined",
    "RunRecord",
    "SerializationError",
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
