"""User events (``ctx.emit``): buffered at the current position, they ride with the next
durable write, and a replay that emits them again stores nothing new (the event stream's
reading side, ``Follow``, is :mod:`durably.events`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..journal import codec
from ..journal.events import EVENT_DATA_BYTES_MAX, USER, NewEvent
from ..journal.text import check_name
from ..limits import EMITS_PER_POSITION_MAX, EVENTS_BUFFERED_MAX
from ..replay.scope import SCOPE
from ..steps import given_text

if TYPE_CHECKING:
    from ..replay.kernel import RunCore


def emit(core: RunCore, kind: Any, data: Any = None) -> None:
    """Buffer a user event at the current position (the one the next recording call
    takes). It consumes no position; its identity is (position, index among the
    position's emits), so a replay that emits it again stores nothing new. Allowed after
    a cancel (cleanup code may say what it does); not after a stop."""
    core.guard(halt=False)
    if not isinstance(kind, str) or not kind:
        raise ConfigError(f"ctx.emit: kind must be a non-empty str, got {given_text(kind)}")
    check_name(kind, "ctx.emit: the kind")
    if len(core.events) >= EVENTS_BUFFERED_MAX:
        raise ConfigError(
            f"ctx.emit: {EVENTS_BUFFERED_MAX:,} events buffered without a step in between;"
            " events ride with the next recorded step, so record one (or emit less)"
        )
    scope = SCOPE.get()
    if scope is None or scope.core is not core:
        scope = core.root
    pos = f"{scope.prefix}{scope.next}"
    counts = core.emits.counts
    index = counts.get(pos, 0)
    if index >= EMITS_PER_POSITION_MAX:
        raise ConfigError(
            f"ctx.emit({kind!r}): {EMITS_PER_POSITION_MAX:,} events at position {pos}"
            " already; a position holds at most that many (each up to"
            f" {EVENT_DATA_BYTES_MAX:,} bytes), so record a step between emits, or emit"
            " less (one event with a list, a summary)"
        )
    text = codec.dumps({"kind": kind, "data": data}, f"ctx.emit({kind!r})", EVENT_DATA_BYTES_MAX)
    counts[pos] = index + 1
    # In generation N >= 1 the position (and so the dedupe name) carries g<N>.: the
    # positions start again at 0, and generation N's emits never meet generation 0's.
    where = f"{core.gen}{pos}"
    core.events.append(NewEvent(USER, where, text, core.clock.time(), f"emit:{where}:{index}"))
