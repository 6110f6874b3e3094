"""The engine's options, checked once and frozen: every room reads them, none sets them."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from .._record import Record, set_field
from ..clock import Clock
from ..errors import ConfigError
from ..limits import (
    HISTORY_MAX_BYTES,
    HISTORY_MAX_RECORDS,
    HISTORY_WARN_BYTES,
    HISTORY_WARN_RECORDS,
)
from ..replay.kernel import FaultHook

HISTORY_WARN_DEFAULT = (HISTORY_WARN_RECORDS, HISTORY_WARN_BYTES)
HISTORY_MAX_DEFAULT = (HISTORY_MAX_RECORDS, HISTORY_MAX_BYTES)
DEFAULT_URL = "sqlite:///durably.db"
LEASE_S_DEFAULT = 30.0
MAX_STARTS_DEFAULT = 10


class Options(Record, frozen=True):
    """What ``durably.Engine(...)`` was given, checked (see the facade's docstring)."""

    url: str
    clock: Clock
    lease_s: float
    heartbeat_s: float
    max_starts: int
    fault_hook: FaultHook | None
    wait_for_lease: bool
    store_retry_s: float
    park_wait_s: float | None
    history_warn: tuple[int, int] | None
    history_max: tuple[int, int] | None

    def __init__(
        self,
        url: str,
        clock: Clock,
        lease_s: float,
        heartbeat_s: float,
        max_starts: int,
        fault_hook: FaultHook | None,
        wait_for_lease: bool,
        store_retry_s: float,
        park_wait_s: float | None,
        history_warn: tuple[int, int] | None = HISTORY_WARN_DEFAULT,
        history_max: tuple[int, int] | None = HISTORY_MAX_DEFAULT,
    ) -> None:
        set_field(self, "url", url)
        set_field(self, "clock", clock)
        set_field(self, "lease_s", lease_s)
        set_field(self, "heartbeat_s", heartbeat_s)
        set_field(self, "max_starts", max_starts)
        set_field(self, "fault_hook", fault_hook)
        set_field(self, "wait_for_lease", wait_for_lease)
        set_field(self, "store_retry_s", store_retry_s)
        set_field(self, "park_wait_s", park_wait_s)
        set_field(self, "history_warn", history_warn)
        set_field(self, "history_max", history_max)


def check_options(
    url: str,
    clock: Clock,
    *,
    lease_s: float,
    heartbeat_s: float | None,
    max_starts: int,
    fault_hook: FaultHook | None,
    wait_for_lease: bool,
    store_retry_s: float,
    park_wait_s: float | None,
    history_warn: Any = HISTORY_WARN_DEFAULT,
    history_max: Any = HISTORY_MAX_DEFAULT,
) -> Options:
    """The options checked, each bad one a ``ConfigError`` saying what to pass."""
    if lease_s <= 0 or (heartbeat_s is not None and not 0 < heartbeat_s < lease_s):
        raise ConfigError("lease_s must be > 0 and 0 < heartbeat_s < lease_s")
    if max_starts < 1:
        raise ConfigError("max_starts must be >= 1")
    if not store_retry_s >= 0:
        raise ConfigError(f"store_retry_s={store_retry_s!r}: must be >= 0 (seconds)")
    if park_wait_s is not None and (
        isinstance(park_wait_s, bool)
        or not isinstance(park_wait_s, (int, float))
        or not park_wait_s >= 0
    ):
        raise ConfigError(
            f"park_wait_s={park_wait_s!r}: must be None (wait in-process as long as a"
            " parked run needs) or a number of seconds >= 0"
        )
    if park_wait_s is not None:
        # A bound past any float (10**400) or infinity is no bound at all; kept as a
        # float, a huge int would overflow where the wait's deadline is computed.
        park_wait_s = float(park_wait_s) if park_wait_s < 1e300 else math.inf
        if math.isinf(park_wait_s):
            park_wait_s = None
    warn = _history_bound("history_warn", history_warn, HISTORY_WARN_DEFAULT)
    cap = _history_bound("history_max", history_max, HISTORY_MAX_DEFAULT)
    if warn is not None and cap is not None and (warn[0] > cap[0] or warn[1] > cap[1]):
        raise ConfigError(
            f"history_warn={warn!r} is past history_max={cap!r}: the warning must come"
            " before the limit (records and bytes each at most history_max's)"
        )
    return Options(
        url=url,
        clock=clock,
        lease_s=lease_s,
        heartbeat_s=heartbeat_s or lease_s / 3,
        max_starts=max_starts,
        fault_hook=fault_hook,
        wait_for_lease=wait_for_lease,
        store_retry_s=store_retry_s,
        park_wait_s=park_wait_s,
        history_warn=warn,
        history_max=cap,
    )


def _history_bound(name: str, value: Any, default: tuple[int, int]) -> tuple[int, int] | None:
    """``history_warn`` / ``history_max`` checked: ``(records, bytes)``, two ints >= 1,
    or None (not checked)."""
    if value is None:
        return None
    if (
        isinstance(value, tuple | list)
        and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in value)
    ):
        return (int(value[0]), int(value[1]))
    raise ConfigError(
        f"{name}={value!r:.100}: must be (records, bytes) of a run's current generation,"
        f" two ints >= 1 (the default is {name}=({default[0]:_}, {default[1] // 1048576} *"
        " 1024 * 1024)), or None for no bound"
    )


def refuse_misspelt_options(options: dict[str, Any], own: Sequence[str]) -> None:
    """An option no store takes that is close to an option's name (``lease`` for
    ``lease_s``) is a misspelling: say which name was meant, rather than the store's list
    alone, which leaves out the engine's own options (``own``)."""
    from ..store.open import STORE_OPTIONS

    stores = sorted({n for names in STORE_OPTIONS.values() for n in names})
    for name in sorted(options):
        if name in stores:
            continue
        import difflib  # only on a misspelled option: 1.5 ms of every start otherwise

        close = difflib.get_close_matches(name, [*own, *stores], n=1, cutoff=0.6)
        if close:
            whose = "durably.Engine" if close[0] in own else "the store"
            raise ConfigError(
                f"durably.Engine takes no option {name!r}: did you mean {close[0]!r} (an"
                f" option of {whose})? The engine's own options: {', '.join(own)}; the"
                f" stores': {', '.join(stores)}"
            )
