"""Every store refuses an option it does not take, naming the ones it does: an option
silently ignored is a setting its caller believes is in force."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

import durably
from durably.store.open import open_store

TAKES = {
    "SQLite": "synchronous, busy_timeout_s, create",
    "PostgreSQL": "pool_min, pool_max, connect_timeout_s",
}


def test_every_store_refuses_options_it_does_not_take(journal_url: str) -> None:
    kind = "SQLite" if journal_url.startswith("sqlite") else "PostgreSQL"
    with pytest.raises(durably.ConfigError) as err:
        durably.Engine(journal_url, keep_days=5, bogus=1)
    text = str(err.value)
    assert f"the {kind} store does not take the option(s) 'bogus', 'keep_days'" in text
    assert f"it takes {TAKES[kind]}" in text
    with pytest.raises(durably.ConfigError, match="'bogus'"):
        open_store(journal_url, durably.FakeClock(), bogus=1)


def test_an_option_of_the_other_store_is_refused_and_named(journal_url: str) -> None:
    if journal_url.startswith("sqlite"):
        other, option, value = "PostgreSQL", "pool_max", 4
    else:
        other, option, value = "SQLite", "synchronous", "NORMAL"
    with pytest.raises(durably.ConfigError, match=f"'{option}' is an option of the {other}"):
        durably.Engine(journal_url, **{option: value})


def test_each_store_takes_its_own_options(journal_url: str) -> None:
    if journal_url.startswith("sqlite"):
        options: dict[str, object] = {"synchronous": "NORMAL", "busy_timeout_s": 1.0}
    else:
        options = {"pool_min": 1, "pool_max": 2, "connect_timeout_s": 3}
    with durably.Engine(journal_url, **options) as engine:
        assert engine.store is not None


def test_the_option_table_is_the_constructors() -> None:
    from durably.store.open import STORE_OPTIONS
    from durably.store.postgres import PostgresStore
    from durably.store.sqlite import SQLiteStore

    for kind, cls in (("SQLite", SQLiteStore), ("PostgreSQL", PostgresStore)):
        params = inspect.signature(cls).parameters.values()
        assert all(p.kind is not p.VAR_KEYWORD for p in params)
        # durability is every store's, passed by the engine by name (not a store option).
        taken = tuple(p.name for p in params if p.kind is p.KEYWORD_ONLY)
        assert taken == (*STORE_OPTIONS[kind], "durability")


def test_a_sqlite_url_with_query_options_is_refused(tmp_path: Path) -> None:
    from durably.idempotency import IdempotencyStore

    url = f"sqlite:///{tmp_path / 'j.db'}?synchronous=NORMAL"
    with pytest.raises(durably.ConfigError, match="takes no \\?options"):
        durably.Engine(url)
    with pytest.raises(durably.ConfigError, match="takes no \\?options"):
        IdempotencyStore(url)
    assert list(tmp_path.iterdir()) == []  # no file named after the option either
