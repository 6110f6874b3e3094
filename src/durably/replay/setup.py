"""What one attempt at replaying a run is built from: a frozen :class:`RunSetup`.

The engine (a claimed attempt) and ``durably replay --check`` build it the same way,
with :meth:`RunSetup.for_run`, and hand it to the kernel at construction: no module sets
the kernel's attributes afterwards (STYLE habit 16), so the two can no longer drift.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from .._record import Record, set_field
from ..journal.codec import CODEC_VERSION
from ..journal.records import RunRecord, StepRecord


class Now(Protocol):
    """The kernel's view of the engine's clock (a ``durably.Clock``): it only reads the
    time; waiting is the driver's. Named here so the kernel never reaches the clock
    module (whose fake clock takes a thread lock)."""

    def time(self) -> float:
        """The current time in seconds since the epoch."""
        ...


FaultHook = Callable[[str, str, str, str], None]
"""``hook(run_id, position, step_name, window)`` with window ``before``, ``effect`` or
``recorded``; called only for live (not replayed) steps, and only when set."""

Fetch = Callable[[Sequence[str]], Mapping[str, str]]
"""Reads stored blobs by digest (the store's ``get_blobs``): only to explain a mismatch."""


class RunSetup(Record, frozen=True):
    """The fixed facts of one attempt at a run.

    ``history`` is the run's journal as loaded; ``token`` the fencing token of this
    claim (every write is conditioned on it); ``incarnation`` part of every idempotency
    key (None for runs from before keys had one); ``generation`` the run's generation
    (part of each ledger entry's name); ``codec_version`` the digest rule the run was
    created with; ``prompt_versions`` the run's recorded prompt version and the code's;
    ``lease_deadline`` the claim's lease deadline on the engine's clock (the driver's own
    view, renewed by the heartbeat); ``checking`` True under ``durably replay --check``
    (the first live action ends the replay); ``fetch_blobs`` reads recorded input blobs,
    only to explain a mismatch; ``history_warn`` and ``history_max`` the engine's
    ``(records, bytes)`` bounds of a generation (None: not checked).
    """

    __slots__ = (
        "checking",
        "clock",
        "codec_version",
        "fault_hook",
        "fetch_blobs",
        "generation",
        "history",
        "history_max",
        "history_warn",
        "incarnation",
        "lease_deadline",
        "prompt_versions",
        "run_id",
        "token",
    )

    run_id: str
    history: Sequence[StepRecord]
    clock: Now
    fault_hook: FaultHook | None
    token: int
    incarnation: str | None
    generation: int
    codec_version: int
    prompt_versions: tuple[str | None, str | None]
    lease_deadline: float | None
    checking: bool
    fetch_blobs: Fetch | None
    history_warn: tuple[int, int] | None
    history_max: tuple[int, int] | None

    def __init__(
        self,
        run_id: str,
        history: Sequence[StepRecord],
        clock: Now,
        fault_hook: FaultHook | None = None,
        token: int = 0,
        incarnation: str | None = None,
        generation: int = 0,
        codec_version: int = CODEC_VERSION,
        prompt_versions: tuple[str | None, str | None] = (None, None),
        lease_deadline: float | None = None,
        checking: bool = False,
        fetch_blobs: Fetch | None = None,
        history_warn: tuple[int, int] | None = None,
        history_max: tuple[int, int] | None = None,
    ) -> None:
        set_field(self, "run_id", run_id)
        set_field(self, "history", history)
        set_field(self, "clock", clock)
        set_field(self, "fault_hook", fault_hook)
        set_field(self, "token", token)
        set_field(self, "incarnation", incarnation)
        set_field(self, "generation", generation)
        set_field(self, "codec_version", codec_version)
        set_field(self, "prompt_versions", prompt_versions)
        set_field(self, "lease_deadline", lease_deadline)
        set_field(self, "checking", checking)
        set_field(self, "fetch_blobs", fetch_blobs)
        set_field(self, "history_warn", history_warn)
        set_field(self, "history_max", history_max)

    @classmethod
    def for_run(
        cls,
        run: RunRecord,
        history: Sequence[StepRecord],
        clock: Now,
        *,
        prompt_version: str | None,
        fetch_blobs: Fetch | None,
        fault_hook: FaultHook | None = None,
        checking: bool = False,
        history_warn: tuple[int, int] | None = None,
        history_max: tuple[int, int] | None = None,
    ) -> RunSetup:
        """The setup of an attempt at ``run`` whose journal is ``history``, for code
        declaring ``prompt_version``: the one way the engine and replay-check build it."""
        return cls(
            run_id=run.run_id,
            history=history,
            clock=clock,
            fault_hook=fault_hook,
            token=run.fencing_token,
            incarnation=run.incarnation,
            generation=run.generation,
            codec_version=run.codec_version,
            prompt_versions=(run.prompt_version, prompt_version),
            lease_deadline=None if checking else run.lease_expires_at,
            checking=checking,
            fetch_blobs=fetch_blobs,
            history_warn=history_warn,
            history_max=history_max,
        )
