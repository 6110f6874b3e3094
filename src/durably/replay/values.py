"""Deterministic values: ``ctx.now()``, ``ctx.random()``, ``ctx.uuid()``. Each takes a
position and is recorded once (the record rides with the next durable write, flushed
before any live step runs); a replay returns the recorded value.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import SerializationError
from ..journal import codec
from ..journal.records import NOW, RANDOM, UUID
from ..limits import STEP_OUTPUT_BYTES_MAX

if TYPE_CHECKING:
    import uuid as _uuid

    from .kernel import RunCore

_KIND_DIGESTS = {k: codec.digest(f"durably.{k}", [], {}) for k in (NOW, RANDOM, UUID)}


def value(core: RunCore, kind: str, produce: Callable[[], Any]) -> Any:
    """``now``/``random``/``uuid``: recorded once, replayed after."""
    core.guard()
    pos = core.take()
    name = f"durably.{kind}"
    digest = _KIND_DIGESTS[kind]
    rec = core.recorded(pos, kind, name, digest)
    try:
        if rec is not None and rec.output is not None:
            return codec.loads(rec.output)
        core.live(pos)
        text = codec.dumps(produce(), name, STEP_OUTPUT_BYTES_MAX)
        got = codec.loads(text)
    except SerializationError as exc:
        raise core.poison(
            SerializationError(f"position {pos} {name}: {exc}; the run is blocked")
        ) from None
    core.record_marker(pos, kind, name, digest, text)
    return got


def now(core: RunCore) -> dt.datetime:
    """The recorded current time, UTC."""
    got: dt.datetime = value(
        core, NOW, lambda: dt.datetime.fromtimestamp(core.clock.time(), dt.UTC)
    )
    return got


def random(core: RunCore) -> float:
    """A recorded float in [0, 1)."""
    import random as _random  # on first use: a workflow that draws none never loads it

    return float(value(core, RANDOM, _random.random))


def uuid(core: RunCore) -> _uuid.UUID:
    """A recorded random UUID."""
    import uuid as _uuid  # imported on first use: it pulls in platform (slow)

    got: _uuid.UUID = value(core, UUID, _uuid.uuid4)
    return got
