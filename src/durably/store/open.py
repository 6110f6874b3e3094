"""Opening a store from its URL: the one place that knows every backend.

It sits above ``base`` (the protocol) and the backends, so that neither imports the
other's module and there is no import circle.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from ..clock import Clock
from ..errors import ConfigError
from ..redact import redact, redact_url
from .base import Store

StoreFactory = Callable[[str, Clock, dict[str, object]], Store]


def open_store(url: str, clock: Clock, **options: Any) -> Store:
    """Open the store a URL names: ``sqlite:///path`` or ``postgresql://...``.

    ``options`` go to the store's constructor; an option the store does not take is a
    :class:`ConfigError` naming the ones it does.
    """
    if not isinstance(url, str):
        # bytes or a Path would fail below with a bare TypeError or AttributeError.
        raise ConfigError(
            f"a database URL is a str such as 'sqlite:///agent.db' or"
            f" 'postgresql://user@host/db', got {type(url).__name__} {redact(repr(url))}"
        )
    if url.startswith("sqlite:"):
        from .sqlite import SQLiteStore

        _check_options(SQLiteStore, options)
        return SQLiteStore(url, clock, **options)
    if url.startswith(("postgresql:", "postgres:")):
        try:
            from .postgres import PostgresStore  # type: ignore[import-not-found,unused-ignore]
        except ImportError as exc:
            raise ConfigError(
                f"cannot open {redact_url(url)!r}: the PostgreSQL store needs psycopg 3; install it"
                " with pip install 'durably[postgres]'"
            ) from exc
        _check_options(PostgresStore, options)
        store: Store = PostgresStore(url, clock, **options)
        return store
    raise ConfigError(
        f"unknown database URL {redact_url(url)!r}: use sqlite:///path/to/file.db (a relative path)"
        " or sqlite:////absolute/path.db, or postgresql://user@host/db"
    )


def _check_options(cls: type, options: dict[str, Any]) -> None:
    params = inspect.signature(cls).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    allowed = [n for n, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY]
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ConfigError(f"{cls.__name__} does not take option(s) {unknown}; it takes {allowed}")
