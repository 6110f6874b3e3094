"""The receiving side refuses an option of the other database rather than ignore it."""

from __future__ import annotations

import pytest

from durably.errors import ConfigError
from durably.idempotency import IdempotencyStore, Outbox


def test_the_receiving_side_refuses_options_of_the_other_database(db_url: str) -> None:
    if db_url.startswith("sqlite"):
        with pytest.raises(ConfigError, match="IdempotencyStore on SQLite does not take pool_size"):
            IdempotencyStore(db_url, pool_size=4)
        with pytest.raises(ConfigError, match="it takes busy_timeout_s, synchronous"):
            Outbox(db_url, pool_size=4)
        IdempotencyStore(db_url, busy_timeout_s=1, synchronous="NORMAL", heartbeat=False).close()
        return
    with pytest.raises(
        ConfigError,
        match="IdempotencyStore on PostgreSQL does not take busy_timeout_s, synchronous",
    ):
        IdempotencyStore(db_url, busy_timeout_s=60, synchronous="NORMAL")
    with pytest.raises(ConfigError, match="Outbox on PostgreSQL does not take busy_timeout_s"):
        Outbox(db_url, busy_timeout_s=60)
    with pytest.raises(ConfigError, match="on PostgreSQL it takes pool_size"):
        IdempotencyStore(db_url, synchronous="FULL")
    IdempotencyStore(db_url, pool_size=2, heartbeat=False).close()
    Outbox(db_url, pool_size=2).close()
