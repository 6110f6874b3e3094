"""Fixtures for the receiving side: a fake clock and a database URL per backend.

``db_url`` runs a test once on SQLite and once on PostgreSQL (marked ``postgres``), which
makes every test that uses it part of the one contract suite both stores must pass.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from idem_helpers import FakeClock

from durably.idempotency import IdempotencyStore, migrate


@pytest.fixture
def clock() -> FakeClock:
    """A fake clock starting at a fixed instant."""
    return FakeClock()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def bare_db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty database URL: a SQLite file, or an empty PostgreSQL schema."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'idem.db'}"
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
def db_url(bare_db_url: str) -> str:
    """A fresh database with the receiving side's tables, as `durably migrate` makes them."""
    migrate(bare_db_url)
    return bare_db_url


@pytest.fixture
def make_store(db_url: str, clock: FakeClock) -> Iterator[Callable[..., IdempotencyStore]]:
    """Open stores on ``db_url`` with the fake clock (options per call); close them after."""
    opened: list[IdempotencyStore] = []

    def make(**options: object) -> IdempotencyStore:
        options.setdefault("clock", clock)
        options.setdefault("heartbeat", False)
        store = IdempotencyStore(db_url, **options)  # type: ignore[arg-type]
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()
