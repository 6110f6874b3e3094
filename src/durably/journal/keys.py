"""Positions and idempotency keys: how a place in a run is named, checked and sorted."""

from __future__ import annotations

import os
import re
from typing import Final

from ..limits import INCARNATION_CHARS

# Matched with fullmatch and spelled [0-9]: ``$`` also matches before a trailing newline
# and ``\d`` (like str.isdigit) takes any Unicode digit, so a hand-edited "0123456789ab\n"
# or "٣" would pass and reach a receiving side inside a key ("²" passes isdigit, then
# int() refuses it). Each part is bounded: int() refuses more than 4,300 digits, and a
# crafted row must fail check() instead of crashing the code that sorts positions.
_POSITION_PART_DIGITS_MAX: Final = 18
_POSITION_PART = rf"[0-9]{{1,{_POSITION_PART_DIGITS_MAX}}}"
_POSITION = re.compile(rf"{_POSITION_PART}(\.{_POSITION_PART}\.{_POSITION_PART})*")
_INCARNATION = re.compile(rf"[0-9a-f]{{{INCARNATION_CHARS}}}")


def valid_position(position: object) -> bool:
    """True when ``position`` is a well-formed position string (``4``, ``4.1.0``, ...)."""
    return isinstance(position, str) and _POSITION.fullmatch(position) is not None


def valid_incarnation(incarnation: str) -> bool:
    """True when ``incarnation`` is exactly 12 lowercase hex characters."""
    return _INCARNATION.fullmatch(incarnation) is not None


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


def generation_prefix(generation: int) -> str:
    """What a position of ``generation`` carries in its key, its events' positions and
    dedupe names, its signal consumers and approval request ids: ``""`` for generation 0
    (today's format, unchanged), ``"g3."`` for generation 3 (``ctx.continue_as_new``
    starts positions again at 0, and this keeps every name distinct)."""
    return "" if generation == 0 else f"g{generation}."


def idempotency_key(
    run_id: str, incarnation: str | None, position: str, generation: int = 0
) -> str:
    """The idempotency key of ``position`` in a run: ``"<run_id>:<incarnation>:<position>"``
    (in generation N >= 1 of the run: ``"<run_id>:<incarnation>:g<N>.<position>"``).

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
    where = position if generation == 0 else f"g{generation}.{position}"
    if incarnation is None:
        return f"{run_id}:{where}"
    return f"{run_id}:{incarnation}:{where}"
