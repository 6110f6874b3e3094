"""The public surface of ``durably``, pinned.

``durably.__all__`` is compared with the literal list below: adding a name means editing
this pin on purpose (and documenting the name in docs/api.md), and removing or renaming
one fails here before any user's import fails. Every pinned name must resolve to a
documented object, so a later move of a file leaves a re-export behind.
"""

from __future__ import annotations

import importlib
import inspect
import typing

import pytest

import durably

# Sorted with sorted(). Names once published are kept (DESIGN.md, "Public API").
PINNED_ALL = [
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
    "NOT_DONE",
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


def test_all_is_exactly_the_pin() -> None:
    exported = list(durably.__all__)
    assert len(exported) == len(set(exported)), "durably.__all__ lists a name twice"
    added = sorted(set(exported) - set(PINNED_ALL))
    removed = sorted(set(PINNED_ALL) - set(exported))
    assert not removed, f"names dropped from durably.__all__ (published names are kept): {removed}"
    assert not added, (
        f"names added to durably.__all__ without updating the pin in {__file__}"
        f" (and docs/api.md): {added}"
    )
    assert sorted(exported) == PINNED_ALL


def test_pin_is_sorted() -> None:
    assert sorted(PINNED_ALL) == PINNED_ALL


def test_every_exported_name_resolves_and_is_documented() -> None:
    for name in PINNED_ALL:
        assert hasattr(durably, name), f"durably.{name} is in __all__ but does not resolve"
        obj = getattr(durably, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert inspect.getdoc(obj), f"durably.{name} has no docstring"


def test_star_import_gives_exactly_the_pin() -> None:
    namespace: dict[str, object] = {}
    exec("from durably import *", namespace)
    assert sorted(k for k in namespace if k != "__builtins__") == PINNED_ALL


def test_returned_types_are_the_exported_ones() -> None:
    """The engine's methods are annotated with the very classes ``durably`` exports, so a
    user's annotation ``durably.RunRecord`` matches what ``engine.get_run`` returns."""
    hints = {
        "get_run": durably.RunRecord,
        "cancel": durably.RunRecord,
        "spend": durably.Spend,
        "events": durably.EventPage,
        "follow": durably.Follow,
    }
    for method, cls in hints.items():
        ret = inspect.signature(getattr(durably.Engine, method), eval_str=True).return_annotation
        assert ret is cls, f"Engine.{method} returns {ret!r}, not durably.{cls.__name__}"
    history = inspect.signature(durably.Engine.history, eval_str=True).return_annotation
    assert history == list[durably.StepRecord]
    assert typing.get_type_hints(durably.EventPage)["events"] == list[durably.Event]


# The public packages beside ``durably`` itself, pinned the same way: their ``__all__``
# (durably.limits has none: every upper-case name in it is a documented bound).
MODULE_PINS = {
    "durably.idempotency": [
        "Claim",
        "ClientError",
        "IdempotencyKeyInFlight",
        "IdempotencyKeyReused",
        "IdempotencyLeaseLost",
        "IdempotencyMiddleware",
        "IdempotencyRecord",
        "IdempotencyStore",
        "InvalidIdempotencyKey",
        "KEY_CHARS_MAX",
        "Outbox",
        "OutboxEntry",
        "OutboxMessage",
        "PER_SESSION_HEADERS",
        "RelayReport",
        "RequestFailed",
        "SchemaNotMigrated",
        "StoredError",
        "fingerprint_of",
        "migrate",
        "request_fingerprint",
    ],
    "durably.otel": [
        "RunTracer",
        "export_run",
        "follow_run",
    ],
    "durably.limits": [
        "APPROVALS_LIST_MAX",
        "APPROVALS_PENDING_MAX",
        "APPROVAL_ARGS_BYTES_MAX",
        "APPROVAL_DIGEST_PREFIX_MIN",
        "APPROVAL_NOTE_CHARS_MAX",
        "APPROVAL_TIMEOUT_S_MAX",
        "BACKOFF_MAX_S",
        "CANCEL_REASON_CHARS_MAX",
        "CLOCK_SKEW_WARN_S",
        "COST_USD_MAX",
        "EMITS_PER_POSITION_MAX",
        "ERROR_MESSAGE_CHARS_MAX",
        "EVENTS_BUFFERED_MAX",
        "EVENTS_PAGE_MAX",
        "EVENT_DATA_BYTES_MAX",
        "GATHER_DEPTH_MAX",
        "GENERATIONS_MAX",
        "GENERATION_PREFIX_CHARS_MAX",
        "HASH_SHOWN_CHARS_MIN",
        "HISTORY_MAX_BYTES",
        "HISTORY_MAX_RECORDS",
        "HISTORY_WARN_BYTES",
        "HISTORY_WARN_RECORDS",
        "INCARNATION_CHARS",
        "INLINE_CHARS_MAX",
        "KEY_CHARS_MAX",
        "LEASE_WAIT_MAX_S",
        "LIST_RUNS_LIMIT_MAX",
        "LIST_RUNS_SEARCH_CHARS_MAX",
        "MIB",
        "MODEL_DELTAS_MAX",
        "NAME_BYTES_MAX",
        "OUTPUT_INLINE_BYTES_MAX",
        "PARK_REASON_CHARS_MAX",
        "POSITION_CHARS_MAX",
        "RECOVER_SCAN_MAX",
        "RECOVER_WAIT_S",
        "RETRIES_MAX",
        "RUN_ID_CHARS_MAX",
        "RUN_INPUT_BYTES_MAX",
        "RUN_RESULT_BYTES_MAX",
        "SCOPE_POSITIONS_MAX",
        "SETTLE_TURNS_MAX",
        "SIGNALS_PENDING_MAX",
        "SIGNAL_DATA_BYTES_MAX",
        "SIGNAL_TIMEOUT_S_MAX",
        "STEP_OUTPUT_BYTES_MAX",
        "STREAM_BATCH_MAX",
        "STREAM_CHUNKS_MAX",
        "STREAM_FLUSH_S",
        "STREAM_QUEUE_MAX",
        "SYNC_STEP_THREADS_MAX",
        "TIMER_S_MAX",
        "TOKENS_MAX",
        "WORKER_CONCURRENCY_MAX",
    ],
}


@pytest.mark.parametrize("module", sorted(MODULE_PINS))
def test_public_modules_are_exactly_their_pins(module: str) -> None:
    mod = importlib.import_module(module)
    names = getattr(mod, "__all__", None)
    if names is None:
        names = [n for n in vars(mod) if n.isupper()]
    pinned = MODULE_PINS[module]
    assert sorted(pinned) == pinned
    assert sorted(names) == pinned, (
        f"{module}: dropped {sorted(set(pinned) - set(names))}, added without updating the"
        f" pin {sorted(set(names) - set(pinned))}"
    )
    for name in pinned:
        assert hasattr(mod, name), f"{module}.{name} is pinned but does not resolve"
