"""The engine's options, checked once and frozen: every room reads them, none sets them."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..clock import Clock
from ..errors import ConfigError
from ..replay.kernel import FaultHook

DEFAULT_URL = "sqlite:///durably.db"
LEASE_S_DEFAULT = 30.0
MAX_STARTS_DEFAULT = 10


@dataclass(frozen=True)
class Options:
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
