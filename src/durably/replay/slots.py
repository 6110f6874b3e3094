"""The kernel's state slots: one typed slot per capability that keeps state across the
recording calls of an attempt (instead of loose attributes on :class:`RunCore`).

Each slot is plain data; the capability's room holds what acts on it (``replay.gathers``
and ``runtime.settle`` for gathers, ``features.budgets`` and the kernel's ledger charge
for budgets, ``features.stream`` for emits, the step room for blobs). A new capability
adds its slot here and one attribute to :class:`RunCore`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..budget import Budget, Spend
from .park import Parked
from .setup import Fetch


@dataclass(slots=True)
class GatherState:
    """``ctx.gather`` and ``ctx.branches`` groups of this attempt."""

    failed: list[str] = field(default_factory=list)
    """Prefixes (``"4."``) of groups that ended in failure: their branches may stop earlier
    on replay than live, so what they recorded and this attempt did not ask for again is
    not a sign of changed code."""
    parks: dict[str, Parked] = field(default_factory=dict)
    """Waits of gather branches that parked, by branch prefix (``"4.0."``): not latched
    run-wide, so sibling branches go on live; a later recording call of the parked branch
    (its code caught the Parked) raises it again."""
    went_live: set[str] = field(default_factory=set)
    """The gather-branch prefixes whose code has gone live: a wait that parked in an
    earlier attempt lets its sibling branches replay first (runtime/settle.py)."""
    entered: int = 0
    """How many ``ctx.branches`` branches are entered now: one still entered when the
    workflow returns is code still recording behind the run's end."""
    approvals_waiting: int = 0
    """Approval requests this attempt's branches wait on (bounded by
    APPROVALS_PENDING_MAX)."""
    legacy: frozenset[str] | None = None
    """Positions of gathers whose branches are recorded but which have no record of their
    own (journals from before gathers were recorded), computed on first need."""


@dataclass(slots=True)
class BudgetState:
    """The run's budget and spend as this claim knows them."""

    generation: int
    """The run's generation: part of each ledger entry's name."""
    limit: Budget | None = None
    """The limit this claim was given (ctx.budget / the workflow option); else the stored
    one applies."""
    spend: Spend | None = None
    """The run's spend as the ledger last said (None: not read in this claim)."""
    arrived: Spend | None = None
    """The run's spend after a late charge the driver made from another thread (usage an
    attempt reported after its timeout: ``RunCore.spend_arrived``)."""
    arrived_taken: Spend | None = None
    """The last of those a position going live took (``RunCore.live``)."""


@dataclass(slots=True)
class BlobState:
    """Input blobs (large step arguments stored once)."""

    fetch: Fetch | None
    """Reads recorded input blobs (the store's get_blobs), only to explain a mismatch."""
    known: set[str] = field(default_factory=set)
    """Blobs this attempt has written (or sent to be written): not sent again."""


@dataclass(slots=True)
class EmitState:
    """User events (``ctx.emit``): how many emits each position has had (an emit's
    identity, by which a replay dedupes it)."""

    counts: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class HistorySize:
    """The size of the run's current generation as this claim knows it (the loaded
    history, then each record it writes): what ``Engine(history_warn=, history_max=)``
    are checked against at every position that goes live, with no query of its own."""

    records: int
    """Positions recorded in the generation (an intent and its result count once)."""
    bytes: int
    """UTF-8 bytes of stored text its records hold (outputs, inputs manifests, errors,
    names and digests; a blob by its reference)."""
    warn: tuple[int, int] | None
    """``(records, bytes)`` past which the generation gets its warning (None: never)."""
    max: tuple[int, int] | None
    """``(records, bytes)`` at which a position going live raises HistoryTooLarge."""
    warned: bool = False
    """Whether this claim has produced the generation's warning event."""
    counted: set[str] = field(default_factory=set)
    """Positions this claim wrote that the loaded history did not hold."""
