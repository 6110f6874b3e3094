"""Where a run waits: :class:`Parked`, the kernel's signal that the run parks (a timer, a
signal, an approval, a step in doubt, or several waits of gather branches at once) and
unwinds to its driver, which writes the park.

It is an internal control-flow signal (an :class:`~durably.errors.Unwind`: workflow code's
``except Exception`` never swallows it), never recorded as a step's error type, so it
lives with the kernel whose cargo it carries: typed request and record values, set once
at construction (STYLE habit 18: no ``object`` cargo to dodge an import cycle).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from ..errors import Unwind
from ..journal.records import StepRecord
from ..journal.text import utc_text

if TYPE_CHECKING:
    from ..approvals import ApprovalRequest

_FIELDS: Final = frozenset(
    {"reason", "wake_at", "wait_signals", "detail", "approvals", "waits", "records"}
)


class Parked(Unwind):
    """Internal: the run parks (timer, signal, approval, doubt) and unwinds to its driver.

    ``reason`` is what it waits for (``timer``, ``signal``, ``approval``, ``in_doubt``, or
    ``waits`` for several waits of ``ctx.gather`` branches at once), ``wake_at`` when it
    wakes (None: no timer), ``wait_signals`` the signal names it waits for (any of them
    wakes it; ``wait_signal=`` gives one), ``approvals`` the approval requests it waits on
    (their rows are written with the park; deciding any wakes it; ``approval=`` gives
    one), ``detail`` the park reason in words when the default (``timer until
    2026-11-30T10:00:00Z``) does not say enough, ``waits`` the waits in words, one each,
    when this park combines several, and ``records`` the records written only by the park
    itself (never riding with another write): a gather branch's new approval request,
    whose ``waiting`` record must not reach the journal without the ``approvals`` row the
    park writes with it. Frozen: its fields are set here, once.
    """

    def __init__(
        self,
        reason: str,
        wake_at: float | None,
        *,
        wait_signal: str | None = None,
        detail: str | None = None,
        approval: ApprovalRequest | None = None,
        wait_signals: tuple[str, ...] = (),
        approvals: tuple[ApprovalRequest, ...] = (),
        waits: tuple[str, ...] = (),
        records: tuple[StepRecord, ...] = (),
    ) -> None:
        self.reason = reason
        self.wake_at = wake_at
        self.wait_signals = wait_signals if wait_signal is None else (wait_signal, *wait_signals)
        self.detail = detail
        self.approvals = approvals if approval is None else (approval, *approvals)
        self.waits = waits
        self.records = records
        super().__init__(f"parked ({reason})")

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _FIELDS and name in self.__dict__:
            raise AttributeError(f"Parked is frozen: {name} is set at construction")
        super().__setattr__(name, value)


WAITS = "waits"
"""The park reason (``Parked.reason``, the ``run.parked`` event's kind) of a run whose
``ctx.gather`` branches parked on more than one wait at once."""


def combine_parks(parks: list[Parked]) -> Parked:
    """One park for a gather whose branches parked (nested gathers' combined parks are
    flattened): it wakes at the earliest known wake time (None when no wait has one), on
    a signal of any waited name, or on a decision of any request. A single wait stays
    itself (the run parks exactly as a top-level wait would)."""
    if len(parks) == 1:
        return parks[0]
    waits = tuple(w for p in parks for w in (p.waits or (_wait_text(p),)))
    wakes = [p.wake_at for p in parks if p.wake_at is not None]
    combined = Parked(
        WAITS,
        min(wakes) if wakes else None,
        wait_signals=tuple(dict.fromkeys(n for p in parks for n in p.wait_signals)),
        approvals=tuple(a for p in parks for a in p.approvals),
        detail=f"{len(waits)} waits: {'; '.join(waits)}",
        waits=waits,
        records=tuple(r for p in parks for r in p.records),
    )
    return combined


def _wait_text(parked: Parked) -> str:
    if parked.detail is not None:
        return parked.detail
    if parked.wake_at is None:
        return parked.reason
    return f"{parked.reason} until {utc_text(parked.wake_at)}"


class ContinuedAsNew(Unwind):
    """Internal: ``ctx.continue_as_new(*args, **kwargs)`` ends the run's generation; it
    unwinds to the driver like a park (latched: every later recording call raises it
    again), which hands over to the next generation in one transaction. ``input`` is the
    next generation's input (canonical JSON ``{"args": [...], "kwargs": {...}}``),
    ``input_digest`` its sha256, ``call_args``/``call_kwargs`` the values it encodes
    (for the engine to check them against the workflow's parameters; ``args`` is the
    exception's own)."""

    def __init__(
        self, input: str, input_digest: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        self.input = input
        self.input_digest = input_digest
        super().__init__("continued as new")
        self.call_args = args
        self.call_kwargs = kwargs
