"""Durable timers (``ctx.sleep``, ``ctx.sleep_until``): a ``sleep`` record at the timer's
position holds the wake time taken from the recorded clock when the timer was first
reached; a timer not yet due parks the run until then.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, SerializationError
from ..journal import codec
from ..journal.records import OK, SLEEP, WAITING, StepRecord
from ..limits import TIMER_S_MAX
from ..replay.park import Parked

if TYPE_CHECKING:
    from ..replay.kernel import RunCore


def sleep(core: RunCore, seconds: Any) -> None:
    """``ctx.sleep(seconds)``: a durable timer at the next position (see
    :func:`_timer`)."""
    core.guard()
    if not _timer_reached(core) and (
        isinstance(seconds, bool)
        or not isinstance(seconds, (int, float))
        # The range first: it also refuses NaN and infinities, and compares an int too
        # large for a float (10**400) exactly, where math.isfinite would raise.
        or not 0 <= seconds <= TIMER_S_MAX
    ):
        raise core.poison(
            ConfigError(
                f"ctx.sleep({seconds!r:.100}): seconds must be a finite number from 0 to"
                f" {TIMER_S_MAX:,.0f} (100 years), e.g. ctx.sleep(3600) for an hour; for a"
                " point in time use ctx.sleep_until(datetime). The run is blocked; fix"
                " the code, then resume it."
            )
        )
    _timer(core, lambda now: now + float(seconds))


def sleep_until(core: RunCore, when: Any) -> None:
    """``ctx.sleep_until(when)``: a durable timer until a timezone-aware datetime."""
    core.guard()
    if not isinstance(when, dt.datetime):
        raise core.poison(
            ConfigError(
                f"ctx.sleep_until({when!r:.100}): pass a timezone-aware datetime, e.g."
                " datetime(2026, 12, 1, 9, 0, tzinfo=datetime.UTC); for a duration use"
                " ctx.sleep(seconds). The run is blocked; fix the code, then resume it."
            )
        )
    if when.tzinfo is None or when.utcoffset() is None:
        raise core.poison(
            ConfigError(
                f"ctx.sleep_until({when.isoformat()}): the datetime is naive (no timezone),"
                " so it names no fixed instant (the process's local zone would decide);"
                " give it one: when.replace(tzinfo=datetime.UTC) or a zoneinfo.ZoneInfo."
                " The run is blocked; fix the code, then resume it."
            )
        )
    at = when.timestamp()
    if at - core.clock.time() > TIMER_S_MAX:
        raise core.poison(
            ConfigError(
                f"ctx.sleep_until({when.isoformat()}): more than 100 years ahead; a timer"
                " that far out is a bug. The run is blocked; fix the code, then resume it."
            )
        )
    _timer(core, lambda now: at)


def _timer_reached(core: RunCore) -> bool:
    """Whether the timer about to take the next position was reached before (its
    record is there): then its recorded wake time wins and its argument is not looked
    at, so one computed from the wall clock (``reset_at - time.time()``, negative on the
    replay after the wake) does not block the run."""
    rec = core.history.get(core.scope().peek())
    return rec is not None and rec.kind == SLEEP


def _timer(core: RunCore, wake: Callable[[float], float]) -> None:
    """A durable timer at the next position; ``wake(now)`` gives the wake time when the
    timer is first reached (on the recorded clock).

    The digest does not cover the duration: once reached, the recorded wake time wins
    (a deploy that changes the duration applies to timers not yet reached). Recorded
    ``ok``: the timer is over, return. Otherwise (nothing recorded, or ``waiting``) the
    timer goes live: due, an ``ok`` record rides with the next write and the call
    returns; not due, a ``waiting`` record holding the wake time (written once: a
    replay parks again at the same recorded time, never a fresh one) and the run
    parks, latched, until then.
    """
    pos = core.take()
    rec = core.recorded(pos, SLEEP, SLEEP_NAME, _SLEEP_DIGEST)
    if rec is not None and rec.status == OK:
        return
    core.live(pos)  # nothing recorded, or a wait in progress: the timer is live here
    now = core.clock.time()
    wake_at = wake(now) if rec is None else _recorded_wake(core, pos, rec)
    text = codec.dumps({"wake_at": wake_at})
    started = now if rec is None else rec.started_at
    if wake_at <= now:
        core.record_marker(pos, SLEEP, SLEEP_NAME, _SLEEP_DIGEST, text, since=started, at=now)
        return
    if rec is None:
        core.record_marker(pos, SLEEP, SLEEP_NAME, _SLEEP_DIGEST, text, WAITING, at=now)
    raise core.park(Parked(TIMER, wake_at))


def _recorded_wake(core: RunCore, pos: str, rec: StepRecord) -> float:
    """The wake time a ``waiting`` timer record holds (a damaged row blocks the run)."""
    try:
        if rec.status != WAITING:
            raise ValueError(f"status {rec.status!r}")
        at = codec.loads(rec.output or "null")["wake_at"]
        if isinstance(at, bool) or not isinstance(at, (int, float)) or not math.isfinite(at):
            raise ValueError(f"wake_at {at!r}")
        if at - core.clock.time() > TIMER_S_MAX:
            # No timer durably records ends that far out, and the park reason could
            # not print it (past year 9999): a damaged row, not a wait.
            raise ValueError(f"wake_at {at!r} is more than 100 years ahead")
        return float(at)
    except (SerializationError, TypeError, KeyError, ValueError) as exc:
        raise core.poison(
            SerializationError(
                f"position {pos} {SLEEP_NAME}: the recorded timer cannot be read ({exc});"
                " the run is blocked until the row is repaired"
            )
        ) from None


SLEEP_NAME = "durably.sleep"


# Without the duration: the recorded wake time wins (see RunCore._timer).
_SLEEP_DIGEST = codec.digest(SLEEP_NAME, [], {})


TIMER = "timer"
"""The park reason (``Parked.reason``) of a timer."""
