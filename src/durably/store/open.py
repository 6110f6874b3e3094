"""Opening a store from its URL: the one place that knows every backend.

It sits above ``base`` (the protocol) and the backends, so that neither imports the
other's module and there is no import circle.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..clock import Clock
from ..errors import ConfigError
from ..redact import redact, redact_url
from .base import Store
from .durability import check_mode

StoreFactory = Callable[[str, Clock, dict[str, object]], Store]


def open_store(url: str, clock: Clock, durability: str | None = None, **options: Any) -> Store:
    """Open the store a URL names: ``sqlite:///path`` or ``postgresql://...``.

    ``durability`` is the mode (:mod:`durably.store.durability`; None: power, or what a
    SQLite ``synchronous`` given alone keeps). ``options`` go to the store's constructor;
    an option the store does not take is a :class:`ConfigError` naming the ones it does.
    """
    check_mode(durability)
    if not isinstance(url, str):
        # bytes or a Path would fail below with a bare TypeError or AttributeError.
        raise ConfigError(
            f"a database URL is a str such as 'sqlite:///agent.db' or"
            f" 'postgresql://user@host/db', got {type(url).__name__} {redact(repr(url))}"
        )
    if url.startswith("sqlite:"):
        from .sqlite import SQLiteStore

        _check_options("SQLite", SQLiteStore, options)
        return SQLiteStore(url, clock, durability=durability, **options)
    if url.startswith(("postgresql:", "postgres:")):
        try:
            from .postgres import PostgresStore  # type: ignore[import-not-found,unused-ignore]
        except ImportError as exc:
            raise ConfigError(
                f"cannot open {redact_url(url)!r}: the PostgreSQL store needs psycopg 3; install it"
                " with pip install 'durably[postgres]'"
            ) from exc
        _check_options("PostgreSQL", PostgresStore, options)
        store: Store = PostgresStore(url, clock, durability=durability, **options)
        return store
    raise ConfigError(
        f"unknown database URL {redact_url(url)!r}: use sqlite:///path/to/file.db (a relative path)"
        " or sqlite:////absolute/path.db, or postgresql://user@host/db"
    )


# The options of each store, to say where an option refused by one belongs (kept by hand:
# importing the PostgreSQL store needs psycopg; tests/unit/test_store_options.py checks
# them against the constructors).
STORE_OPTIONS: dict[str, tuple[str, ...]] = {
    "SQLite": ("synchronous", "busy_timeout_s", "create"),
    "PostgreSQL": ("pool_min", "pool_max", "connect_timeout_s"),
}


def _check_options(kind: str, cls: type, options: dict[str, Any]) -> None:
    """Refuse an option the store does not take (``ConfigError`` naming the ones it
    does): an ignored option is a setting the user believes is in force."""
    if not options:
        return  # nothing to refuse (and inspect stays unimported: issue 28)
    import inspect

    params = inspect.signature(cls).parameters
    # durability is every store's and the engine's own option (passed by name above).
    allowed = [
        n
        for n, p in params.items()
        if p.kind is inspect.Parameter.KEYWORD_ONLY and n != "durability"
    ]
    unknown = sorted(set(options) - set(allowed))
    if not unknown:
        return
    elsewhere = [
        f"{name!r} is an option of the {other} store"
        for name in unknown
        for other, names in STORE_OPTIONS.items()
        if other != kind and name in names
    ]
    raise ConfigError(
        f"the {kind} store does not take the option(s) {', '.join(map(repr, unknown))}; it"
        f" takes {', '.join(allowed)} (durably.Engine passes each keyword option it does"
        " not take itself to its store)" + (f". {'; '.join(elsewhere)}" if elsewhere else "")
    )
