"""The operations a recording call yields to its driver, and what a :class:`Call` produced.

Each recording call of the kernel is a generator: it yields one of these and receives
the driver's reply (``durably.context`` holds the one sync and the one async driver). The
operations are plain data, so the kernel can be driven by a scripted driver with no
store at all.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..budget import Budget, SpendEntry
from ..current import StepInfo as CurrentStep
from ..errors import ConfigError
from ..journal.events import NewEvent
from ..journal.records import StepRecord
from ..steps import Usage

__all__ = [
    "Call",
    "Charge",
    "Op",
    "Outcome",
    "ReadDecision",
    "ReadSpend",
    "SetBudget",
    "TakeSignal",
    "Wait",
    "Write",
]


@dataclass(slots=True)
class Call:
    """Operation: call ``fn(*args, **kwargs)`` with an optional per-attempt timeout."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    timeout_s: float | None
    is_async: bool
    # What ``durably.current_step()`` returns while ``fn`` runs.
    info: CurrentStep | None = None
    # The call's name in the spend ledger (``"a2"``: attempt 2, ``"r1"``: a reconcile),
    # when its usage is charged: usage an attempt reports after its timeout is charged
    # by the driver as it arrives, under this name (see ``RunCore.spend_entry``).
    spend_call: str | None = None


@dataclass(slots=True)
class Write:
    """Operation: append ``records`` to the journal in one fenced transaction, with the
    ``events`` that describe them (and any stream-only events buffered since the last
    write, which so cost no commit of their own)."""

    records: list[StepRecord]
    events: list[NewEvent] = field(default_factory=list)


@dataclass(slots=True)
class Wait:
    """Operation: wait ``seconds`` on the engine's clock (retry backoff)."""

    seconds: float


@dataclass(slots=True)
class ReadDecision:
    """Operation: read the decision of the run's approval request at ``request_id``
    (fenced; the store takes the expiry first when the request is past it, so an expiry
    and a person's decision are never both taken). The reply is the request's
    :class:`~durably.approvals.ApprovalRow`, or None when the store has none."""

    request_id: str


@dataclass(slots=True)
class TakeSignal:
    """Operation: consume the oldest unconsumed signal ``name`` of the run for the wait at
    position ``consumer`` (fenced; asking again for the same consumer returns the same
    signal). The reply is ``(seq, data JSON)`` or None."""

    name: str
    consumer: str


@dataclass(slots=True)
class Charge:
    """Operation: add one call's reported usage to the run's spend ledger (its own
    commit, before the step's result); the driver replies with the run's :class:`Spend`."""

    entry: SpendEntry


@dataclass(slots=True)
class ReadSpend:
    """Operation: read the run's spend and stored budget; the reply is a :class:`Spend`."""


@dataclass(slots=True)
class SetBudget:
    """Operation: store the run's budget (fenced), for ``runs show`` and later claims."""

    budget: Budget


Op = Call | Write | Wait | TakeSignal | Charge | ReadSpend | SetBudget | ReadDecision


@dataclass(slots=True)
class Outcome:
    """What a :class:`Call` produced: a value or an exception, and the spend reported.
    ``misuse`` is a driver's own refusal (a sync workflow given an awaitable to run): it
    blocks the run like any misuse, never counting as the step's failure or retry."""

    value: Any = None
    error: Exception | None = None
    usage: Usage = field(default_factory=Usage)
    misuse: ConfigError | None = None
