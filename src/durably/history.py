"""What the journal holds: runs and the records of their positions.

Records are frozen dataclasses checked on the way in (before a store writes them) and on
the way out (when a store reads them back), so a corrupt or hand-edited row is caught at
the boundary instead of deep inside a replay.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from typing import Final

from .limits import CANCEL_REASON_CHARS_MAX as CANCEL_REASON_CHARS_MAX
from .limits import ERROR_MESSAGE_CHARS_MAX as ERROR_MESSAGE_CHARS_MAX
from .limits import GATHER_DEPTH_MAX as GATHER_DEPTH_MAX
from .limits import INCARNATION_CHARS as INCARNATION_CHARS
from .limits import KEY_CHARS_MAX as KEY_CHARS_MAX
from .limits import NAME_BYTES_MAX as NAME_BYTES_MAX
from .limits import OUTPUT_INLINE_BYTES_MAX as OUTPUT_INLINE_BYTES_MAX
from .limits import PARK_REASON_CHARS_MAX as PARK_REASON_CHARS_MAX
from .limits import POSITION_CHARS_MAX as POSITION_CHARS_MAX
from .limits import RUN_ID_CHARS_MAX as RUN_ID_CHARS_MAX
from .limits import RUN_INPUT_BYTES_MAX as RUN_INPUT_BYTES_MAX
from .limits import RUN_RESULT_BYTES_MAX as RUN_RESULT_BYTES_MAX
from .limits import SCOPE_POSITIONS_MAX as SCOPE_POSITIONS_MAX
from .limits import SIGNAL_DATA_BYTES_MAX as SIGNAL_DATA_BYTES_MAX
from .limits import STEP_OUTPUT_BYTES_MAX as STEP_OUTPUT_BYTES_MAX

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

# Limits (STYLE habit 8) live in durably.limits, each with what it bounds and why; they are
# imported above under their old names here (``durably.history.NAME_BYTES_MAX`` goes on
# working).

# Matched with fullmatch and spelled [0-9]: ``$`` also matches before a trailing newline
# and ``\d`` (like str.isdigit) takes any Unicode digit, so a hand-edited "0123456789ab\n"
# or "٣" would pass and reach a receiving side inside a key ("²" passes isdigit, then
# int() refuses it). Each part is bounded: int() refuses more than 4,300 digits, and a
# crafted row must fail check() instead of crashing the code that sorts positions.
_POSITION_PART_DIGITS_MAX: Final = 18
_POSITION_PART = rf"[0-9]{{1,{_POSITION_PART_DIGITS_MAX}}}"
_POSITION = re.compile(rf"{_POSITION_PART}(\.{_POSITION_PART}\.{_POSITION_PART})*")
_INCARNATION = re.compile(rf"[0-9a-f]{{{INCARNATION_CHARS}}}")


class CorruptRecord(ValueError):
    """A record read from, or about to be written to, the journal breaks an invariant."""


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One position of a run's history: a step result, a failure, or an effect intent."""

    position: str
    kind: str
    name: str
    digest: str
    status: str
    output: str | None = None
    error_type: str | None = None
    error_message: str | None = None
    attempts: int = 1
    started_at: float = 0.0
    finished_at: float | None = None
    usage_tokens: int | None = None
    usage_cost_usd: float | None = None
    # What a step was called with: a manifest of blob digests (durably.inputs), or None.
    inputs: str | None = None
    # Blobs to write with the record, in its transaction: (digest, text) pairs. Not a
    # column and not part of the record's identity (a blob already stored is left out).
    blobs: tuple[tuple[str, str], ...] = field(default=(), compare=False, repr=False)

    def check(self) -> StepRecord:
        """Raise :class:`CorruptRecord` unless the record is well formed; return it."""
        if not isinstance(self.position, str) or not _POSITION.fullmatch(self.position):
            raise CorruptRecord(f"bad position {_shown(self.position)}")
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
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class RunRecord:
    """A run as the journal knows it."""

    run_id: str
    workflow: str
    version: str | None
    prompt_version: str | None
    queue: str
    input: str
    input_digest: str
    codec_version: int
    status: str
    generation: int = 0
    fencing_token: int = 0
    owner: str | None = None
    lease_expires_at: float | None = None
    starts: int = 0
    starts_without_progress: int = 0
    outcome: str | None = None
    error_type: str | None = None
    error_message: str | None = None
    park_reason: str | None = None
    wake_at: float | None = None
    created_at: float = 0.0
    updated_at: float = 0.0
    finished_at: float | None = None
    incarnation: str | None = None
    # A cancel asked for (``engine.cancel``): a durable flag, not a status, until the
    # workflow has unwound and the run ends ``cancelled``. The first reason stays.
    cancel_requested_at: float | None = None
    cancel_reason: str | None = None

    def check(self) -> RunRecord:
        """Raise :class:`CorruptRecord` unless the run row is well formed; return it."""
        _check_types(self, _RUN_TYPES, f"run {_shown(self.run_id)}")
        if self.incarnation is not None and not _INCARNATION.fullmatch(self.incarnation):
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
        """The idempotency key of ``position`` in this run (see :func:`idempotency_key`)."""
        return idempotency_key(self.run_id, self.incarnation, position)


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


def storable_text(text: str, chars_max: int) -> str:
    """``text`` cut to ``chars_max`` characters and made valid UTF-8: a lone surrogate
    (model output cut mid-character) becomes its ``\\udcxx`` escape instead of making the
    journal write fail."""
    cut = text[:chars_max]
    if "\x00" in cut:  # PostgreSQL's text refuses NUL (binary tool output in a message)
        cut = cut.replace("\x00", "\\x00")
    if cut.isascii():
        return cut
    return cut.encode("utf-8", "backslashreplace").decode("utf-8")


def describe_error(exc: BaseException) -> str:
    """``str(exc)``, or what can be said when the exception cannot even say that."""
    try:
        return str(exc)
    except Exception as inner:  # a broken __str__ must not lose the failure itself
        return f"<str() of the error raised {type(inner).__name__}>"


def unstorable(text: str) -> str | None:
    """What keeps ``text`` (a run id, queue or name) out of a journal as it is: a NUL
    (PostgreSQL's text refuses it) or a lone surrogate (not UTF-8); None when nothing."""
    if "\x00" in text:
        return "a NUL character"
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return "a lone UTF-16 surrogate"
    return None


def check_text(text: str, what: str) -> None:
    """Raise :class:`ConfigError` when ``text`` cannot be stored (:func:`unstorable`)."""
    bad = unstorable(text)
    if bad is not None:
        from .errors import ConfigError

        raise ConfigError(
            f"{what} {text[:40]!a} holds {bad}, which a journal cannot store; use printable text"
        )


def check_name(name: str, what: str) -> None:
    """Raise :class:`ConfigError` when ``name`` is longer than :data:`NAME_BYTES_MAX` or
    cannot be stored (:func:`check_text`)."""
    check_text(name, what)
    size = len(name.encode("utf-8", "backslashreplace"))
    if size > NAME_BYTES_MAX:
        from .errors import ConfigError

        raise ConfigError(
            f"{what} {name[:40]!r}... is {size:,} bytes long, more than NAME_BYTES_MAX"
            f" ({NAME_BYTES_MAX}); use a short fixed name and pass the details as arguments"
        )


def position_key(position: str) -> tuple[int, ...]:
    """Sort key putting positions in program order (``4`` < ``4.0.0`` < ``4.1.0`` < ``5``)."""
    return tuple(int(p) for p in position.split("."))


def top_level(position: str) -> int:
    """The top-level position a position belongs to (``4`` for ``4.1.0``)."""
    return int(position.split(".", 1)[0])


def new_incarnation() -> str:
    """A fresh incarnation id: 12 lowercase hex characters (48 random bits)."""
    # os.urandom, not secrets: the same kernel source, without importing secrets (and
    # hmac, base64) on the path of every run's creation.
    return os.urandom(INCARNATION_CHARS // 2).hex()


def idempotency_key(run_id: str, incarnation: str | None, position: str) -> str:
    """The idempotency key of ``position`` in a run: ``"<run_id>:<incarnation>:<position>"``.

    This is the one place keys are built. The incarnation is drawn when the run row is
    created and kept for the life of the row (retries, requeues, lease takeovers), so a
    key is the same on every attempt and after every crash, while a run id reused in
    another journal, or re-created after its row was deleted, or a fork, gets other keys
    (a receiver never mistakes it for the old run). Runs created before incarnations
    existed have none and keep the ``"<run_id>:<position>"`` keys their effects were
    first sent with, so an effect in doubt from before an upgrade is retried under its
    original key.

    Keys of different runs never coincide: a position has no ``:`` and an incarnation is
    exactly 12 hex characters, so a key read from its right end gives back its run id
    (which may itself hold ``:``), incarnation and position. A legacy key ``a:b:3`` equals
    a new one only when ``b`` is the other run's randomly drawn incarnation (2**-48).
    """
    if incarnation is None:
        return f"{run_id}:{position}"
    return f"{run_id}:{incarnation}:{position}"
