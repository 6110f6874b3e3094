"""The store contract fixture: every test here runs against every store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from durably.clock import FakeClock
from durably.store.base import Store
from durably.store.open import open_store


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A URL of an empty journal of each kind."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'journal.db'}"
    url: str = request.getfixturevalue("pg_url")
    return url


@pytest.fixture
def clock() -> FakeClock:
    """The fake clock every contract store runs on."""
    return FakeClock()


@pytest.fixture
def store(store_url: str, clock: FakeClock) -> Iterator[Store]:
    """An open store of each kind on a fake clock."""
    s = open_store(store_url, clock)
    yield s
    s.close()
