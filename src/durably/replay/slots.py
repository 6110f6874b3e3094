"""The kernel's state slots: one typed slot per capability that keeps state across the
recording calls of an attempt (instead of loose attributes on :class:`RunCore`).

Each slot is plain data; the capability's room holds what acts on it (``replay.gathers``
and ``runtime.settle`` for gathers, ``features.budgets`` and the kernel's ledger charge
for budgets, ``features.stream`` for emits, the step room for blobs). A new capability
adds its slot here and one attribute to :class:`RunCore`.
"""

from __future__ import annotations

from .._record import Record
from ..budget import Budget, Spend
from .park import Parked
from .setup import Fetch


class GatherState(Record):
    """``ctx.gather`` and ``ctx.branches`` groups of this attempt."""

    __slots__ = ("approvals_waiting", "entered", "failed", "legacy", "parks", "went_live")

    failed: list[str]
    """Prefixes (``"4."``) of groups that ended in failure: their branches may stop earlier
    on replay than live, so what they recorded and this attempt did not ask for again is
    not a sign of changed code."""
    parks: dict[str, Parked]
    """Waits of gather branches that parked, by branch prefix (``"4.0."``): not latched
    run-wide, so sibling branches go on live; a later recording call of the parked branch
    (its code caught the Parked) raises it again."""
    went_live: set[str]
    """The gather-branch prefixes whose code has gone live: a wait that parked in an
    earlier attempt lets its sibling branches replay first (runtime/settle.py)."""
    entered: int
    """How many ``ctx.branches`` branches are entered now: one still entered when the
    workflow returns is code still recording behind the run's end."""
    approvals_waiting: int
    """Approval requests this attempt's branches wait on (bounded by
    APPROVALS_PENDING_MAX)."""
    legacy: frozenset[str] | None
    """Positions of gathers whose branches are recorded but which have no record of their
    own (journals from before gathers were recorded), computed on first need."""

    def __init__(
        self,
        failed: list[str] | None = None,
        parks: dict[str, Parked] | None = None,
        went_live: set[str] | None = None,
        entered: int = 0,
        approvals_waiting: int = 0,
        legacy: frozenset[str] | None = None,
    ) -> None:
        self.failed = [] if failed is None else failed
        self.parks = {} if parks is None else parks
        self.went_live = set() if went_live is None else went_live
        self.entered = entered
        self.approvals_waiting = approvals_waiting
        self.legacy = legacy


class BudgetState(Record):
    """The run's budget and spend as this claim knows them."""

    __slots__ = ("arrived", "arrived_taken", "generation", "limit", "spend")

    generation: int
    """The run's generation: part of each ledger entry's name."""
    limit: Budget | None
    """The limit this claim was given (ctx.budget / the workflow option); else the stored
    one applies."""
    spend: Spend | None
    """The run's spend as the ledger last said (None: not read in this claim)."""
    arrived: Spend | None
    """The run's spend after a late charge the driver made from another thread (usage an
    attempt reported after its timeout: ``RunCore.spend_arrived``)."""
    arrived_taken: Spend | None
    """The last of those a position going live took (``RunCore.live``)."""

    def __init__(
        self,
        generation: int,
        limit: Budget | None = None,
        spend: Spend | None = None,
        arrived: Spend | None = None,
        arrived_taken: Spend | None = None,
    ) -> None:
        self.generation = generation
        self.limit = limit
        self.spend = spend
        self.arrived = arrived
        self.arrived_taken = arrived_taken


class BlobState(Record):
    """Input blobs (large step arguments stored once)."""

    __slots__ = ("fetch", "known")

    fetch: Fetch | None
    """Reads recorded input blobs (the store's get_blobs), only to explain a mismatch."""
    known: set[str]
    """Blobs this attempt has written (or sent to be written): not sent again."""

    def __init__(self, fetch: Fetch | None, known: set[str] | None = None) -> None:
        self.fetch = fetch
        self.known = set() if known is None else known


class EmitState(Record):
    """User events (``ctx.emit``): how many emits each position has had (an emit's
    identity, by which a replay dedupes it)."""

    __slots__ = ("counts",)

    counts: dict[str, int]

    def __init__(self, counts: dict[str, int] | None = None) -> None:
        self.counts = {} if counts is None else counts


class HistorySize(Record):
    """The size of the run's current generation as this claim knows it (the loaded
    history, then each record it writes): what ``Engine(history_warn=, history_max=)``
    are checked against at every position that goes live, with no query of its own."""

    __slots__ = ("bytes", "counted", "max", "records", "warn", "warned")

    records: int
    """Positions recorded in the generation (an intent and its result count once)."""
    bytes: int
    """UTF-8 bytes of stored text its records hold (outputs, inputs manifests, errors,
    names and digests; a blob by its reference)."""
    warn: tuple[int, int] | None
    """``(records, bytes)`` past which the generation gets its warning (None: never)."""
    max: tuple[int, int] | None
    """``(records, bytes)`` at which a position going live raises HistoryTooLarge."""
    warned: bool
    """Whether this claim has produced the generation's warning event."""
    counted: set[str]
    """Positions this claim wrote that the loaded history did not hold."""

    def __init__(
        self,
        records: int,
        bytes: int,
        warn: tuple[int, int] | None,
        max: tuple[int, int] | None,
        warned: bool = False,
        counted: set[str] | None = None,
    ) -> None:
        self.records = records
        self.bytes = bytes
        self.warn = warn
        self.max = max
        self.warned = warned
        self.counted = set() if counted is None else counted
