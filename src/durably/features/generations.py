"""``ctx.continue_as_new``: end the run's generation and start the next with new input.

A long-lived workflow (a mailbox loop, an agent that runs for days) grows its history
with every step; ``return ctx.continue_as_new(state)`` carries ``state`` into a fresh
generation instead: positions start again at 0, replay loads only the new generation,
and the keys carry it (``{run_id}:{incarnation}:g{N}.{position}``), so none repeats. The
call never returns: it unwinds like a park, and the driver hands over in one fenced
transaction (``Store.continue_as_new``). It is allowed at the history limit (it records
nothing in the generation it ends).
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any, NoReturn

from ..errors import ConfigError, SerializationError, clause
from ..journal import codec
from ..limits import GENERATIONS_MAX, RUN_INPUT_BYTES_MAX
from ..replay.park import ContinuedAsNew

if TYPE_CHECKING:
    from ..replay.kernel import RunCore


def continue_as_new(core: RunCore, args: tuple[Any, ...], kwargs: dict[str, Any]) -> NoReturn:
    """Unwind to the driver with the next generation's input (see the module docstring).

    A halt waiting to be delivered (a cancel, a crossed budget) outranks it: it is
    delivered here, as at any position that would go live. The generation must have
    asked for every recorded position, as when a workflow returns."""
    core.guard()
    if core.halt_requested is not None and core.halted is None and not core.compensating_here():
        core.live(core.take())  # delivers the halt (raises)
    if core.scope() is not core.root:
        raise core.poison(
            ConfigError(
                "ctx.continue_as_new(...) was called inside a ctx.gather or ctx.branches"
                " branch; it ends the whole generation, so call it at the workflow's top"
                " level (after the gather). The run is blocked; fix the code, then resume it."
            )
        )
    if core.open_sagas:
        # The next generation starts with no saga: the undo list of this one would be
        # forgotten, and a failure there would leave this generation's effects in place.
        raise core.poison(
            ConfigError(
                "ctx.continue_as_new(...) was called inside a `with ctx.saga()` block; a"
                " saga's compensations do not carry into the next generation, so a later"
                " failure would leave this block's effects without their undo. Call it after"
                " the block ends (each generation's saga is its own). The run is blocked;"
                " fix the code, then resume it."
            )
        )
    if core.generation + 1 >= GENERATIONS_MAX:
        raise core.poison(
            ConfigError(
                f"run {core.run_id!r} is at generation {core.generation:,}: a run has at most"
                f" {GENERATIONS_MAX:,} (its keys must stay under 255 characters). Start a"
                " new run id with this state instead. The run is blocked."
            )
        )
    core.unconsumed_check()
    try:
        text = codec.dumps(
            {"args": list(args), "kwargs": kwargs},
            "ctx.continue_as_new(...) input",
            RUN_INPUT_BYTES_MAX,
        )
    except SerializationError as exc:
        raise core.poison(
            SerializationError(
                f"{clause(exc)}. The next generation's input must be storable JSON data, as"
                " a run's input is: pass plain data (ids, dicts, lists), not clients. The"
                " run is blocked; fix the code, then resume it."
            )
        ) from None
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    raise core.latch(ContinuedAsNew(text, digest, args, kwargs))
