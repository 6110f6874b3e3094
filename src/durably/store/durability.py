"""Durability modes (DESIGN "Durability modes"): what an acknowledged record survives.

- ``power`` (the default): every commit is fsync'd before it is acknowledged, so every
  acknowledged record survives power loss and an OS crash.
- ``process``: no fsync per commit (SQLite ``synchronous=NORMAL`` in WAL, PostgreSQL
  ``synchronous_commit=off``): an acknowledged record survives the process being killed
  (SIGKILL, an exception, an OOM kill), not an OS crash or power loss, which can lose the
  last commits (never corrupt the journal).
- ``effects``: pure step results (and ``now``/``random``/``uuid`` records, events) ride
  along without an fsync of their own; every other write is fsync'd: an effect's intent
  (so everything the effect depends on is durable before it runs), a park, the end of a
  run, signals, claims. A power loss can only lose pure steps after the last fsync (they
  run again) or put a run in doubt at an effect whose result was not yet fsync'd (never
  redone blind).

``durability`` is the knob users see; SQLite's ``synchronous=`` stays a store detail, and
one that contradicts the mode is a :class:`~durably.errors.ConfigError`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from ..errors import ConfigError
from ..history import StepRecord
from ..journal.records import INTENT

POWER: Final = "power"
PROCESS: Final = "process"
EFFECTS: Final = "effects"
MODES: Final = (POWER, PROCESS, EFFECTS)

# SQLite's synchronous setting of each mode's ordinary commit (effects: a pure step's).
_SQLITE_BASE = {POWER: "FULL", PROCESS: "NORMAL", EFFECTS: "NORMAL"}
# The synchronous settings that keep each mode's promise.
_SQLITE_ALLOWED = {POWER: ("FULL", "EXTRA"), PROCESS: ("NORMAL",), EFFECTS: ("NORMAL",)}
_SQLITE_VALUES = ("FULL", "EXTRA", "NORMAL")


def check_mode(durability: object) -> str | None:
    """``durability`` checked (None: not said), or a ConfigError naming the modes."""
    if durability is None or durability in MODES:
        return durability
    raise ConfigError(
        f"durability={durability!r}: choose 'power' (default: every acknowledged record"
        " survives power loss), 'process' (survives a process crash, no fsync per commit)"
        " or 'effects' (an fsync before every effect's intent, at every park and at the end)"
    )


def sqlite_mode(durability: str | None, synchronous: str | None) -> tuple[str, str]:
    """The mode and SQLite ``synchronous`` setting of a store opened with these options.

    A ``synchronous`` given alone picks the mode it keeps (NORMAL: process; FULL or
    EXTRA: power), as it did before modes existed; given with a ``durability`` it
    contradicts, it is a ConfigError rather than a setting silently overridden.
    """
    mode = check_mode(durability)
    if synchronous is not None and (
        not isinstance(synchronous, str) or synchronous.upper() not in _SQLITE_VALUES
    ):
        raise ConfigError(
            f"synchronous={synchronous!r}: choose FULL (default, survives power loss),"
            " EXTRA, or NORMAL (survives process crashes only); better, say what you need"
            " with durability='power'|'process'|'effects'"
        )
    sync = synchronous.upper() if synchronous is not None else None
    if mode is None:
        mode = PROCESS if sync == "NORMAL" else POWER
    if sync is None:
        return mode, _SQLITE_BASE[mode]
    if sync not in _SQLITE_ALLOWED[mode]:
        raise ConfigError(
            f"synchronous={synchronous!r} contradicts durability={mode!r} (which needs"
            f" synchronous={' or '.join(_SQLITE_ALLOWED[mode])}); drop synchronous= and let"
            " durability= set it"
        )
    return mode, sync


def needs_sync(mode: str, records: Sequence[StepRecord]) -> bool:
    """Whether an append of ``records`` must be fsync'd before it is acknowledged: always,
    but in effects mode, where only an append carrying an effect's intent is (it carries
    every pure record before it to the disk too)."""
    if mode != EFFECTS:
        return mode == POWER
    return any(r.status == INTENT for r in records)
