"""Signals (``ctx.wait_for_signal``): a ``signal`` record at the wait's position, ``waiting``
while the run waits (with its deadline), then ``ok`` with the signal it consumed or its
timeout; the signal itself is taken from the store by a :class:`TakeSignal` operation.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, SerializationError
from ..journal import codec
from ..journal.records import OK, SIGNAL, WAITING, StepRecord
from ..journal.text import check_name, utc_text
from ..limits import SIGNAL_TIMEOUT_S_MAX
from ..replay.ops import Op, TakeSignal
from ..replay.park import Parked

if TYPE_CHECKING:
    from ..replay.kernel import RunCore


def wait_for_signal(
    core: RunCore, name: Any, timeout_s: Any, default: Any
) -> Generator[Op, Any, Any]:
    """``ctx.wait_for_signal(name, timeout_s, default)`` at the next position p.

    Recorded ``ok`` at p: its signal's data (or ``default`` after a recorded timeout),
    with no I/O. Otherwise the oldest unconsumed signal of ``name`` is taken (a
    :class:`TakeSignal`, idempotent per position) and recorded ``ok`` at p; with none,
    past the deadline (recorded at p by the first arrival: now + ``timeout_s``) a
    timeout is recorded and ``default`` returned; else a ``waiting`` record (the
    first time) goes with the park, and the run parks until a signal of ``name`` or
    the deadline wakes it.
    """
    core.guard_replay()
    core.check_dropped()
    if not isinstance(name, str) or not name:
        raise core.poison(
            ConfigError(
                f"ctx.wait_for_signal: the signal name must be a non-empty str, got {name!r:.300}"
            )
        )
    try:
        check_name(name, "ctx.wait_for_signal: the signal name")
    except ConfigError as exc:
        raise core.poison(exc) from None
    # A wait reached before keeps its recorded deadline: its timeout_s is not looked
    # at, so one computed from the wall clock (negative after the deadline) is fine.
    reached = core.history.get(core.scope().peek())
    if (
        (reached is None or reached.kind != SIGNAL or reached.status not in (OK, WAITING))
        and timeout_s is not None
        and (
            isinstance(timeout_s, bool)
            or not isinstance(timeout_s, (int, float))
            or not 0 <= timeout_s < SIGNAL_TIMEOUT_S_MAX
        )
    ):
        raise core.poison(
            ConfigError(
                f"ctx.wait_for_signal({name!r}): timeout_s must be None (wait for ever)"
                f" or a number of seconds from 0 to {SIGNAL_TIMEOUT_S_MAX:,.0f}, got"
                f" {timeout_s!r:.100}, e.g. timeout_s=86400 for a day. The run is blocked;"
                " fix the code, then resume it."
            )
        )
    scope = core.scope()
    pos = scope.take()
    rname, digest = _signal_wait_name(name), _signal_digest(name)
    rec = core.recorded(pos, SIGNAL, rname, digest)
    if rec is not None and rec.status == OK:
        return _signal_value(core, rec, default)
    core.live(pos)  # nothing recorded, or a wait in progress: it goes on live
    deadline: float | None
    if rec is not None and rec.status == WAITING:
        deadline, since = _waiting_deadline(core, rec), rec.started_at
    else:
        since = core.clock.time()
        deadline = None if timeout_s is None else since + float(timeout_s)
    # The take may wait out a failing store: other code on this scope meanwhile would
    # be concurrent use outside ctx.gather (see Scope), as for a live step.
    scope.busy = f"wait_for_signal {pos} {name!r}"
    try:
        # The consumer carries the generation (g2.3): positions start again at 0 there.
        found: tuple[int, str] | None = yield TakeSignal(name, f"{core.gen}{pos}")
    finally:
        scope.busy = None
    now = core.clock.time()
    if found is not None:
        seq, data = found
        try:
            value = codec.loads(data)
            text = codec.dumps({"seq": seq, "data": value}, f"signal {name!r}")
        except SerializationError as exc:
            raise core.poison(
                SerializationError(
                    f"position {pos}: signal {name!r} #{seq} cannot be decoded ({exc});"
                    " the run is blocked until the signals row is repaired"
                )
            ) from None
        core.record_marker(pos, SIGNAL, rname, digest, text, since=since, at=now)
        return codec.loads(text)["data"]
    if deadline is not None and now >= deadline:
        core.record_marker(pos, SIGNAL, rname, digest, _TIMED_OUT, since=since, at=now)
        return default
    if rec is None:  # the first arrival records what it waits for, and until when
        text = codec.dumps({"deadline": deadline}, f"signal {name!r} wait")
        core.record_marker(pos, SIGNAL, rname, digest, text, WAITING, since=since)
    why = signal_park_reason(name, since, deadline)
    raise core.park(Parked(SIGNAL, deadline, wait_signal=name, detail=why))


_SIGNAL_WAIT = "durably.wait_for_signal"


_TIMED_OUT = '{"timeout":true}'


def _signal_wait_name(name: str) -> str:
    """The record name of a wait for signal ``name``: it shows in NonDeterminism messages
    ("history has 'wait_for_signal:approve'...") and in ``runs show``."""
    return f"wait_for_signal:{name}"


def _signal_digest(name: str) -> str:
    return codec.digest(_SIGNAL_WAIT, [name], {})


def _signal_value(core: RunCore, rec: StepRecord, default: Any) -> Any:
    """What a recorded wait returns: the signal's data, or ``default`` after a timeout."""
    try:
        out = codec.loads(rec.output or "null")
        if isinstance(out, dict) and out.get("timeout") is True:
            return default
        if isinstance(out, dict) and "data" in out:
            return out["data"]
        raise SerializationError(f"unexpected record {rec.output!r:.200}")
    except SerializationError as exc:
        raise core.poison(
            SerializationError(
                f"position {rec.position} {rec.name!r}: the recorded signal cannot be decoded"
                f" ({exc}); the run is blocked until the row is repaired"
            )
        ) from None


def _waiting_deadline(core: RunCore, rec: StepRecord) -> float | None:
    """The deadline a ``waiting`` record holds (None: it waits without one)."""
    try:
        # The start and the deadline are printed in the park reason: NaN or a time past
        # year 9999 would crash that inside the workflow (failing the run), so both must
        # be finite and no later than the longest timeout from now.
        since = rec.started_at
        if not math.isfinite(since) or since - core.clock.time() > SIGNAL_TIMEOUT_S_MAX:
            raise TypeError(f"started_at {since!r}")
        out = codec.loads(rec.output or "null")
        deadline = out["deadline"]
        if deadline is None:
            return None
        if (
            isinstance(deadline, (int, float))
            and not isinstance(deadline, bool)
            and math.isfinite(deadline)
            and deadline - core.clock.time() <= SIGNAL_TIMEOUT_S_MAX
        ):
            return float(deadline)
        raise TypeError(f"deadline {deadline!r}")
    except (SerializationError, TypeError, KeyError) as exc:
        raise core.poison(
            SerializationError(
                f"position {rec.position} {rec.name!r}: the recorded wait cannot be decoded"
                f" ({exc}); the run is blocked until the row is repaired"
            )
        ) from None


def signal_park_reason(name: str, since: float, deadline: float | None) -> str:
    """How ``runs show`` and ``runs list`` word a run parked on a signal wait."""
    until = "no timeout" if deadline is None else f"times out at {utc_text(deadline)}"
    return f"signal {name!r} since {utc_text(since)} ({until})"
