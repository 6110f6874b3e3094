"""The operations a recording call yields to its driver, and what a :class:`Call` produced.

Each recording call of the kernel is a generator: it yields one of these and receives
the driver's reply (``durably.context`` holds the one sync and the one async driver). The
operations are plain data, so the kernel can be driven by a scripted driver with no
store at all.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._record import Record
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


class Call(Record):
    """Operation: call ``fn(*args, **kwargs)`` with an optional per-attempt timeout."""

    __slots__ = ("args", "fn", "info", "is_async", "kwargs", "spend_call", "timeout_s")

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    timeout_s: float | None
    is_async: bool
    # What ``durably.current_step()`` returns while ``fn`` runs.
    info: CurrentStep | None
    # The call's name in the spend ledger (``"a2"``: attempt 2, ``"r1"``: a reconcile),
    # when its usage is charged: usage an attempt reports after its timeout is charged
    # by the driver as it arrives, under this name (see ``RunCore.spend_entry``).
    spend_call: str | None

    def __init__(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        timeout_s: float | None,
        is_async: bool,
        info: CurrentStep | None = None,
        spend_call: str | None = None,
    ) -> None:
        self.fn = fn
        self.args = args
        self.kwargs = kwargs
        self.timeout_s = timeout_s
        self.is_async = is_async
        self.info = info
        self.spend_call = spend_call


class Write(Record):
    """Operation: append ``records`` to the journal in one fenced transaction, with the
    ``events`` that describe them (and any stream-only events buffered since the last
    write, which so cost no commit of their own)."""

    __slots__ = ("events", "records")

    records: list[StepRecord]
    events: list[NewEvent]

    def __init__(self, records: list[StepRecord], events: list[NewEvent] | None = None) -> None:
        self.records = records
        self.events = [] if events is None else events


class Wait(Record):
    """Operation: wait ``seconds`` on the engine's clock (retry backoff)."""

    __slots__ = ("seconds",)

    seconds: float

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds


class ReadDecision(Record):
    """Operation: read the decision of the run's approval request at ``request_id``
    (fenced; the store takes the expiry first when the request is past it, so an expiry
    and a person's decision are never both taken). The reply is the request's
    :class:`~durably.approvals.ApprovalRow`, or None when the store has none."""

    __slots__ = ("request_id",)

    request_id: str

    def __init__(self, request_id: str) -> None:
        self.request_id = request_id


class TakeSignal(Record):
    """Operation: consume the oldest unconsumed signal ``name`` of the run for the wait at
    position ``consumer`` (fenced; asking again for the same consumer returns the same
    signal). The reply is ``(seq, data JSON)`` or None."""

    __slots__ = ("consumer", "name")

    name: str
    consumer: str

    def __init__(self, name: str, consumer: str) -> None:
        self.name = name
        self.consumer = consumer


class Charge(Record):
    """Operation: add one call's reported usage to the run's spend ledger (its own
    commit, before the step's result); the driver replies with the run's :class:`Spend`."""

    __slots__ = ("entry",)

    entry: SpendEntry

    def __init__(self, entry: SpendEntry) -> None:
        self.entry = entry


class ReadSpend(Record):
    """Operation: read the run's spend and stored budget; the reply is a :class:`Spend`."""

    __slots__ = ()

    def __init__(self) -> None:
        pass


class SetBudget(Record):
    """Operation: store the run's budget (fenced), for ``runs show`` and later claims."""

    __slots__ = ("budget",)

    budget: Budget

    def __init__(self, budget: Budget) -> None:
        self.budget = budget


Op = Call | Write | Wait | TakeSignal | Charge | ReadSpend | SetBudget | ReadDecision


class Outcome(Record):
    """What a :class:`Call` produced: a value or an exception, and the spend reported.
    ``misuse`` is a driver's own refusal (a sync workflow given an awaitable to run): it
    blocks the run like any misuse, never counting as the step's failure or retry."""

    __slots__ = ("error", "misuse", "usage", "value")

    value: Any
    error: Exception | None
    usage: Usage
    misuse: ConfigError | None

    def __init__(
        self,
        value: Any = None,
        error: Exception | None = None,
        usage: Usage | None = None,
        misuse: ConfigError | None = None,
    ) -> None:
        self.value = value
        self.error = error
        self.usage = Usage() if usage is None else usage
        self.misuse = misuse
