"""Sagas (``ctx.saga()``): where a saga begins compensating, a ``compensate`` marker names
the positions of the steps it undoes, in the order it undoes them; each compensation is
then an ordinary step. The latch that lets compensations record past a delivered halt
is the kernel's (``RunCore.compensation``); the facade is :mod:`durably.saga`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import NonDeterminism
from ..journal import codec
from ..journal.records import COMPENSATE
from ..journal.text import storable_text
from ..limits import ERROR_MESSAGE_CHARS_MAX

if TYPE_CHECKING:
    from ..replay.kernel import RunCore


def compensate_begin(core: RunCore, positions: list[str], error: str) -> None:
    """A saga starts compensating the steps at ``positions`` (in the order it will
    undo them) because of ``error``: take the next position and check or record a
    ``compensate`` marker there. Its digest covers the positions, so a replay that
    would undo other steps, or in another order, is caught before any compensation
    runs; the error text is kept for people (it may differ on replay: a message the
    workflow built live). The marker rides with the first compensation's write."""
    core.guard()
    pos = core.take()
    digest = codec.digest(COMPENSATE_NAME, [positions], {})
    rec = core.history.get(pos)
    if rec is not None:
        core.consumed.add(pos)
        if rec.kind != COMPENSATE or rec.digest != digest:
            raise core.poison(
                NonDeterminism(
                    f"step {pos}: history has {rec.name!r}, code asked"
                    f" for a saga compensating the steps at {', '.join(positions)}"
                    f" ({COMPENSATE_NAME}). The code no longer matches this"
                    " run's history: revert the change, or let old runs finish on workers"
                    " that serve their version first. The run is blocked; nothing recorded"
                    " was lost, and it resumes once the code matches."
                )
            )
        return
    core.live(pos)
    text = codec.dumps(
        {"steps": positions, "error": storable_text(error, ERROR_MESSAGE_CHARS_MAX)},
        f"compensate {pos}",
    )
    core.record_marker(pos, COMPENSATE, COMPENSATE_NAME, digest, text)


COMPENSATE_NAME = "durably.compensate"
