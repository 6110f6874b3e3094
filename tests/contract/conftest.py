"""The store contract fixture: every test here runs against every store."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from durably.clock import FakeClock
from durably.store.base import Store
from durably.store.open import open_store


@pytest.fixture
def store_url(journal_url: str) -> str:
    """A URL of an empty journal of each kind (see tests/conftest.py)."""
    return journal_url


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
