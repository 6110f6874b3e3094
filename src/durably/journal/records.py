"""What the journal holds: runs and the records of their positions.

Records are frozen dataclasses checked on the way in (before a store writes them) and on
the way out (when a store reads them back), so a corrupt or hand-edited row is caught at
the boundary instead of deep inside a replay.
"""

from __future__ import annotations

import operator
from typing import Final

from .._record import Record, replace, set_field
from ..errors import CorruptRecord
from .keys import idempotency_key, valid_incarnation, valid_position

# Record kinds: each consumes one position in program order.
STEP: Final = "step"
NOW: Final = "now"
RANDOM: Final = "random"
UUID: Final = "uuid"
PATCHED: Final = "patched"
# A ``ctx.gather``'s own record at its position (its branches' steps are at ``p.i.*``):
# digest over ``[arity, [branch label, ...]]``, checked on replay before any branch runs.
GATHER: Final = "gather"
# A ``ctx.wait_for_signal``'s record: ``waiting`` while it waits, then ``ok`` with the
# signal it consumed or its timeout.
SIGNAL: Final = "signal"
# Where a run-wide stop (a cancel, a crossed budget) reached the workflow: recorded at the
# position that would have gone live, so a replay raises it at the same place and the
# workflow unwinds (cleans up, compensates) along the same path.
HALT: Final = "halt"
# Where a saga began compensating (``ctx.saga()``): its output names the positions of the
# steps it undoes, in the order it undoes them, and what set it off; each compensation
# (``undo:<name>``) is then an ordinary step at the positions after it. ``engine.retry``
# reads it to refuse re-opening a run whose steps were already undone.
COMPENSATE: Final = "compensate"
# A durable timer (``ctx.sleep``/``ctx.sleep_until``): output ``{"wake_at": T}``, the wake
# time taken from the recorded clock when the timer was first reached.
SLEEP: Final = "sleep"
# A human approval request (``ctx.request_approval``), named ``request_approval:ACTION``,
# digest sha256 of [action, args]: ``waiting`` {"requested_at", "expires_at"} while it
# waits, then ``ok`` {"outcome", "by", "note", "decided_at"} (the decision it took).
APPROVAL: Final = "approval"
KINDS: Final = frozenset(
    {STEP, NOW, RANDOM, UUID, PATCHED, GATHER, HALT, COMPENSATE, SLEEP, SIGNAL, APPROVAL}
)

# Record statuses. An ``intent`` is written before an effect runs; ``ok``/``failed`` are
# results. Only results are ever replayed. ``waiting`` marks a wait in progress (a timer
# not yet due: its output holds the recorded wake time); it is not an intent (nothing
# may have happened in the world), never copied by a fork, and replaced by the wait's
# result when it is over.
OK: Final = "ok"
FAILED: Final = "failed"
INTENT: Final = "intent"
WAITING: Final = "waiting"
RECORD_STATUSES: Final = frozenset({OK, FAILED, INTENT, WAITING})

# Run statuses (DESIGN.md, "Run status").
QUEUED: Final = "queued"
RUNNING: Final = "running"
PARKED: Final = "parked"
COMPLETED: Final = "completed"
FAILED_RUN: Final = "failed"
CANCELLED: Final = "cancelled"
CONTINUED: Final = "continued"
IN_DOUBT: Final = "in_doubt"
BLOCKED: Final = "blocked"
QUARANTINED: Final = "quarantined"
RUN_STATUSES: Final = frozenset(
    {
        QUEUED,
        RUNNING,
        PARKED,
        COMPLETED,
        FAILED_RUN,
        CANCELLED,
        CONTINUED,
        IN_DOUBT,
        BLOCKED,
        QUARANTINED,
    }
)
TERMINAL: Final = frozenset({COMPLETED, FAILED_RUN, CANCELLED, CONTINUED})

REDACTED_DIGEST: Final = "0" * 64
"""The digest a redacted run's input and steps carry instead of theirs (``durably runs
delete --redact``): a hash of a short value is guessable, and no value hashes to it."""


class StepRecord(Record, frozen=True, uncompared=("blobs",), unshown=("blobs",)):
    """One position of a run's history: a step result, a failure, or an effect intent."""

    __slots__ = (
        "attempts",
        "blobs",
        "digest",
        "error_message",
        "error_type",
        "finished_at",
        "inputs",
        "kind",
        "name",
        "output",
        "position",
        "started_at",
        "status",
        "usage_cost_usd",
        "usage_tokens",
    )

    position: str
    kind: str
    name: str
    digest: str
    status: str
    output: str | None
    error_type: str | None
    error_message: str | None
    attempts: int
    started_at: float
    finished_at: float | None
    usage_tokens: int | None
    usage_cost_usd: float | None
    # What a step was called with: a manifest of blob digests (durably.inputs), or None.
    inputs: str | None
    # Blobs to write with the record, in its transaction: (digest, text) pairs. Not a
    # column and not part of the record's identity (a blob already stored is left out).
    blobs: tuple[tuple[str, str], ...]

    def __init__(
        self,
        position: str,
        kind: str,
        name: str,
        digest: str,
        status: str,
        output: str | None = None,
        error_type: str | None = None,
        error_message: str | None = None,
        attempts: int = 1,
        started_at: float = 0.0,
        finished_at: float | None = None,
        usage_tokens: int | None = None,
        usage_cost_usd: float | None = None,
        inputs: str | None = None,
        blobs: tuple[tuple[str, str], ...] = (),
    ) -> None:
        set_field(self, "position", position)
        set_field(self, "kind", kind)
        set_field(self, "name", name)
        set_field(self, "digest", digest)
        set_field(self, "status", status)
        set_field(self, "output", output)
        set_field(self, "error_type", error_type)
        set_field(self, "error_message", error_message)
        set_field(self, "attempts", attempts)
        set_field(self, "started_at", started_at)
        set_field(self, "finished_at", finished_at)
        set_field(self, "usage_tokens", usage_tokens)
        set_field(self, "usage_cost_usd", usage_cost_usd)
        set_field(self, "inputs", inputs)
        set_field(self, "blobs", blobs)

    def check(self) -> StepRecord:
        """Raise :class:`CorruptRecord` unless the record is well formed; return it."""
        if not valid_position(self.position):
            raise CorruptRecord(f"bad position {_shown(self.position)}")
        # The exact types of a well-formed record, all fields read at once (C code): a
        # record durably built or read back passes here; anything else (a str subclass,
        # a hand-edited row's wrong type) takes the field-by-field check, which names it.
        if tuple(map(type, _step_values(self))) not in _STEP_EXACT:
            _check_types(self, _STEP_TYPES, f"position {self.position}")
        if self.kind not in KINDS:
            raise CorruptRecord(f"position {self.position}: unknown kind {self.kind!r}")
        if self.status not in RECORD_STATUSES:
            raise CorruptRecord(f"position {self.position}: unknown status {self.status!r}")
        if self.status in (OK, WAITING) and self.output is None:
            raise CorruptRecord(f"position {self.position}: {self.status} record without output")
        if self.status == FAILED and self.error_type is None:
            raise CorruptRecord(f"position {self.position}: failure without error type")
        if len(self.digest) != 64:
            raise CorruptRecord(f"position {self.position}: bad digest {self.digest!r}")
        if self.attempts < 1:
            raise CorruptRecord(f"position {self.position}: attempts {self.attempts} < 1")
        return self

    def replace(self, **changes: object) -> StepRecord:
        """A copy with ``changes`` applied."""
        return replace(self, **changes)


def stored_bytes(rec: StepRecord) -> int:
    """The UTF-8 bytes of stored text a record holds (what history limits count: its
    name, digest, output, error and inputs manifest; a blob counts by its reference, as
    the record keeps only the digest). Cheap, as it runs for every record a claim loads:
    lengths, and an encode only of an output or error that is not ASCII (a name is at
    most NAME_BYTES_MAX, counted by its characters)."""
    out = rec.output or ""
    size = len(rec.name) + len(rec.digest) + len(out) + len(rec.inputs or "")
    if not out.isascii():
        size += len(out.encode("utf-8", "surrogatepass")) - len(out)
    msg = rec.error_message
    if msg is not None:
        size += len(msg) if msg.isascii() else len(msg.encode("utf-8", "surrogatepass"))
    return size


class RunRecord(Record, frozen=True):
    """A run as the journal knows it."""

    __slots__ = (
        "cancel_reason",
        "cancel_requested_at",
        "codec_version",
        "created_at",
        "error_message",
        "error_type",
        "fencing_token",
        "finished_at",
        "generation",
        "incarnation",
        "input",
        "input_digest",
        "lease_expires_at",
        "outcome",
        "owner",
        "park_reason",
        "prompt_version",
        "queue",
        "run_id",
        "starts",
        "starts_without_progress",
        "status",
        "updated_at",
        "version",
        "wake_at",
        "workflow",
    )

    run_id: str
    workflow: str
    version: str | None
    prompt_version: str | None
    queue: str
    input: str
    input_digest: str
    codec_version: int
    status: str
    generation: int
    fencing_token: int
    owner: str | None
    lease_expires_at: float | None
    starts: int
    starts_without_progress: int
    outcome: str | None
    error_type: str | None
    error_message: str | None
    park_reason: str | None
    wake_at: float | None
    created_at: float
    updated_at: float
    finished_at: float | None
    incarnation: str | None
    # A cancel asked for (``engine.cancel``): a durable flag, not a status, until the
    # workflow has unwound and the run ends ``cancelled``. The first reason stays.
    cancel_requested_at: float | None
    cancel_reason: str | None

    def __init__(
        self,
        run_id: str,
        workflow: str,
        version: str | None,
        prompt_version: str | None,
        queue: str,
        input: str,
        input_digest: str,
        codec_version: int,
        status: str,
        generation: int = 0,
        fencing_token: int = 0,
        owner: str | None = None,
        lease_expires_at: float | None = None,
        starts: int = 0,
        starts_without_progress: int = 0,
        outcome: str | None = None,
        error_type: str | None = None,
        error_message: str | None = None,
        park_reason: str | None = None,
        wake_at: float | None = None,
        created_at: float = 0.0,
        updated_at: float = 0.0,
        finished_at: float | None = None,
        incarnation: str | None = None,
        cancel_requested_at: float | None = None,
        cancel_reason: str | None = None,
    ) -> None:
        set_field(self, "run_id", run_id)
        set_field(self, "workflow", workflow)
        set_field(self, "version", version)
        set_field(self, "prompt_version", prompt_version)
        set_field(self, "queue", queue)
        set_field(self, "input", input)
        set_field(self, "input_digest", input_digest)
        set_field(self, "codec_version", codec_version)
        set_field(self, "status", status)
        set_field(self, "generation", generation)
        set_field(self, "fencing_token", fencing_token)
        set_field(self, "owner", owner)
        set_field(self, "lease_expires_at", lease_expires_at)
        set_field(self, "starts", starts)
        set_field(self, "starts_without_progress", starts_without_progress)
        set_field(self, "outcome", outcome)
        set_field(self, "error_type", error_type)
        set_field(self, "error_message", error_message)
        set_field(self, "park_reason", park_reason)
        set_field(self, "wake_at", wake_at)
        set_field(self, "created_at", created_at)
        set_field(self, "updated_at", updated_at)
        set_field(self, "finished_at", finished_at)
        set_field(self, "incarnation", incarnation)
        set_field(self, "cancel_requested_at", cancel_requested_at)
        set_field(self, "cancel_reason", cancel_reason)

    def check(self) -> RunRecord:
        """Raise :class:`CorruptRecord` unless the run row is well formed; return it."""
        # The column types by exact-type tuple (a set lookup), checked field by field
        # (which names a wrong field) the first time a tuple is seen: every claim,
        # creation and finish reads a run row, and the 26 fields' isinstance calls cost
        # a short run more than its step's own checks.
        shape = tuple(map(type, _run_values(self)))
        if shape not in _RUN_SHAPES:
            _check_types(self, _RUN_TYPES, f"run {_shown(self.run_id)}")
            if len(_RUN_SHAPES) < _RUN_SHAPES_MAX:
                _RUN_SHAPES.add(shape)
        if self.incarnation is not None and not valid_incarnation(self.incarnation):
            raise CorruptRecord(f"run {self.run_id!r}: bad incarnation {self.incarnation!r}")
        if self.status not in RUN_STATUSES:
            raise CorruptRecord(f"run {self.run_id!r}: unknown status {self.status!r}")
        if self.status == COMPLETED and self.outcome is None:
            raise CorruptRecord(f"run {self.run_id!r}: completed without an outcome")
        if self.status == FAILED_RUN and self.error_type is None:
            raise CorruptRecord(f"run {self.run_id!r}: failed without an error type")
        return self

    @property
    def terminal(self) -> bool:
        """True once the run can never execute again."""
        return self.status in TERMINAL

    def key(self, position: str) -> str:
        """The idempotency key of ``position`` in this run's current generation (see
        :func:`idempotency_key`)."""
        return idempotency_key(self.run_id, self.incarnation, position, self.generation)


# The Python types each column may hold once read back. A hand-edited SQLite row can hold
# any type in any column (text in an INTEGER column stays text), and code that formats or
# compares the fields would crash on it with a bare TypeError; check() names it instead.
_S, _I, _F, _N = (str,), (int,), (int, float), (type(None),)
_STEP_TYPES: Final = {
    "position": _S,
    "kind": _S,
    "name": _S,
    "digest": _S,
    "status": _S,
    "output": _S + _N,
    "error_type": _S + _N,
    "error_message": _S + _N,
    "attempts": _I,
    "started_at": _F,
    "finished_at": _F + _N,
    "usage_tokens": _I + _N,
    "usage_cost_usd": _F + _N,
    "inputs": _S + _N,
}
_STEP_FIELDS: Final = tuple(_STEP_TYPES)
_step_values = operator.attrgetter(*_STEP_FIELDS)


def _exact_combinations() -> frozenset[tuple[type, ...]]:
    """Every tuple of exact field types :data:`_STEP_TYPES` allows (bool excluded, as
    in :func:`_check_types`)."""
    combos: list[tuple[type, ...]] = [()]
    for allowed in _STEP_TYPES.values():
        combos = [(*c, t) for c in combos for t in allowed]
    return frozenset(combos)


# 2**9 tuples of 14 types: a set lookup instead of 28 isinstance calls per record.
_STEP_EXACT: Final = _exact_combinations()
_RUN_TYPES: Final = {
    **dict.fromkeys(("run_id", "workflow", "queue", "input", "input_digest", "status"), _S),
    **dict.fromkeys(("codec_version", "generation", "fencing_token", "starts"), _I),
    "starts_without_progress": _I,
    **dict.fromkeys(
        ("version", "prompt_version", "owner", "outcome", "error_type", "error_message"),
        _S + _N,
    ),
    **dict.fromkeys(("park_reason", "incarnation"), _S + _N),
    **dict.fromkeys(("lease_expires_at", "wake_at", "finished_at"), _F + _N),
    "cancel_requested_at": _F + _N,
    "cancel_reason": _S + _N,
    **dict.fromkeys(("created_at", "updated_at"), _F),
}
_run_values = operator.attrgetter(*_RUN_TYPES)
# Exact-type tuples of run rows that passed the field-by-field check (a row's NULLs pick
# one of a few dozen in practice; bounded all the same).
_RUN_SHAPES: set[tuple[type, ...]] = set()
_RUN_SHAPES_MAX: Final = 1024
_SHOWN_CHARS_MAX: Final = 60


def _shown(value: object) -> str:
    """A crafted value in an error message: its repr, cut (it may be megabytes long)."""
    text = repr(value)
    return text if len(text) <= _SHOWN_CHARS_MAX else f"{text[:_SHOWN_CHARS_MAX]}..."


def _check_types(record: object, types: dict[str, tuple[type, ...]], where: str) -> None:
    for name, allowed in types.items():
        value = getattr(record, name)
        # bool is an int subclass, never a column's value.
        if not isinstance(value, allowed) or isinstance(value, bool):
            raise CorruptRecord(
                f"{where}: {name} is {type(value).__name__} {_shown(value)}, not"
                f" {' or '.join(t.__name__ for t in allowed)}"
            )
