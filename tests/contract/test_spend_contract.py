"""The spend ledger and budget store calls (issue 12), checked against every store."""

from __future__ import annotations

import pytest

from durably.budget import Budget, Spend, SpendEntry
from durably.errors import LeaseLost
from durably.store.base import Store

from .test_store_contract import ME, alive, new_run


def entry(
    name: str,
    tokens: int,
    cost: float = 0.0,
    *,
    position: str = "0",
    token: int = 1,
    attempt: int = 1,
    split: tuple[int, int] | None = None,
    generation: int = 0,
) -> SpendEntry:
    return SpendEntry(
        name,
        generation,
        position,
        attempt,
        token,
        tokens,
        None if split is None else split[0],
        None if split is None else split[1],
        cost,
    )


def test_a_run_without_spend_or_budget(store: Store) -> None:
    store.create_run(new_run())
    assert store.get_spend("r1") == Spend()
    assert store.get_spend("no-such-run") == Spend()


def test_record_spend_sums_and_stores_each_entry_once(store: Store) -> None:
    store.create_run(new_run())
    store.claim("r1", ME, 30, 10, alive)
    first = store.record_spend("r1", entry("g0:0:t1:a1", 100, 0.25, split=(70, 30)))
    assert first == Spend(100, 70, 30, 0.25, 1, None)
    # The same entry again (a write retried after an unknown outcome): counted once.
    assert store.record_spend("r1", entry("g0:0:t1:a1", 100, 0.25, split=(70, 30))) == first
    # Another attempt, another claim, another generation: each is real spend.
    store.record_spend("r1", entry("g0:0:t1:a2", 50, 0.5, attempt=2))
    store.record_spend("r1", entry("g0:0:t2:a1", 10, token=2))
    total = store.record_spend("r1", entry("g1:0:t3:a1", 1, generation=1, token=3))
    assert (total.tokens, total.input_tokens, total.output_tokens, total.entries) == (
        161,
        70,
        30,
        4,
    )
    assert total.cost_usd == pytest.approx(0.75)
    assert store.get_spend("r1") == total
    # Runs do not share a ledger.
    store.create_run(new_run("r2"))
    assert store.get_spend("r2") == Spend()


def test_record_spend_is_not_fenced(store: Store) -> None:
    """The call happened whoever holds the lease now: a stale owner's spend counts."""
    store.create_run(new_run())
    store.claim("r1", ME, 30, 10, alive)
    store.claim("r1", ME, 30, 10, lambda _: True)  # token 2 now
    assert store.record_spend("r1", entry("g0:0:t1:a1", 5, token=1)).tokens == 5


def test_set_budget_is_fenced_and_the_latest_wins(store: Store) -> None:
    store.create_run(new_run())
    store.claim("r1", ME, 30, 10, alive)
    store.set_budget("r1", 1, Budget(tokens=1000))
    assert store.get_spend("r1").budget == Budget(tokens=1000)
    store.set_budget("r1", 1, Budget(cost_usd=2.5))
    assert store.get_spend("r1").budget == Budget(cost_usd=2.5)
    store.set_budget("r1", 1, Budget())  # stored, with no limit on either measure
    assert store.get_spend("r1").budget == Budget()
    with pytest.raises(LeaseLost):
        store.set_budget("r1", 0, Budget(tokens=1))
    with pytest.raises(LeaseLost):
        store.set_budget("nope", 1, Budget(tokens=1))
    assert store.get_spend("r1").budget == Budget()
    store.record_spend("r1", entry("g0:0:t1:a1", 7))
    assert store.get_spend("r1") == Spend(7, 0, 0, 0.0, 1, Budget())


def test_large_values_round_trip(store: Store) -> None:
    store.create_run(new_run())
    store.claim("r1", ME, 30, 10, alive)
    big = 10**15
    store.set_budget("r1", 1, Budget(tokens=big, cost_usd=1e12))
    store.record_spend("r1", entry("a", big, 1e12))
    spend = store.get_spend("r1")
    assert spend.tokens == big and spend.budget == Budget(tokens=big, cost_usd=1e12)
    assert spend.fraction(spend.budget) == 1.0 and spend.over(spend.budget) is None
