"""The capabilities whose state lives in the kernel's typed slots (replay/slots.py),
driven by a scripted driver: budgets (the ledger charge and the limit) and user events.
No store, no engine, no thread, no event loop."""

from __future__ import annotations

from typing import Any

import pytest

from durably.budget import Budget, Spend
from durably.errors import BudgetExceeded
from durably.features import budgets, emits
from durably.journal.events import USER
from durably.replay import values
from durably.replay.ops import Charge, ReadSpend, SetBudget
from durably.steps import Usage

from .test_scripted import Script, drive, kernel


def test_a_budget_is_stored_once_and_a_charge_over_it_asks_for_a_halt() -> None:
    core = kernel()
    limit = Budget(tokens=100)
    stored: list[Budget] = []
    script: Script = [
        (ReadSpend, lambda op: Spend(tokens=10)),
        (SetBudget, lambda op: stored.append(op.budget)),
    ]
    drive(budgets.set_budget(core, limit), script)
    assert stored == [limit]
    assert core.budgets.limit == limit and core.budgets.spend is not None
    drive(budgets.set_budget(core, limit), [])  # the same again: nothing read or stored

    entries: list[Any] = []

    def charge(op: Charge) -> Spend:
        entries.append(op.entry)
        return Spend(tokens=150, budget=limit)

    drive(core.charge("0", "call", 1, Usage(tokens=140, reported=True)), [(Charge, charge)])
    [entry] = entries
    assert entry.entry == f"g{core.budgets.generation}:0:t{core.token}:call"
    assert isinstance(core.halt_requested, BudgetExceeded)  # delivered at the next live position
    with pytest.raises(BudgetExceeded):
        values.now(core)
    assert core.halted is core.halt_requested


def test_emits_number_per_position_and_replay_with_the_same_identity() -> None:
    core = kernel()
    emits.emit(core, "progress", {"n": 1})
    emits.emit(core, "progress", {"n": 2})
    values.random(core)  # takes position 0
    emits.emit(core, "progress", {"n": 3})
    got = [(e.kind, e.position, e.dedupe) for e in core.take_events()]
    assert got == [
        (USER, "0", "emit:0:0"),
        (USER, "0", "emit:0:1"),
        (USER, "1", "emit:1:0"),
    ]
    assert core.emits.counts == {"0": 2, "1": 1}


def test_spend_that_arrives_on_its_own_crosses_the_budget_at_the_next_live_position() -> None:
    """Usage an attempt reported after its timeout is charged by the driver from the
    attempt's thread and told to the kernel (``spend_arrived``): the next position that
    goes live takes the later reading and delivers the halt; an older reading told after
    it changes nothing."""
    core = kernel()
    limit = Budget(tokens=100)
    drive(budgets.set_budget(core, limit), [(ReadSpend, lambda op: Spend(budget=limit))])
    assert core.halt_requested is None
    core.spend_arrived(Spend(tokens=150, entries=2, budget=limit))
    core.spend_arrived(Spend(tokens=60, entries=1, budget=limit))  # older: ignored
    assert core.halt_requested is None  # nothing acts until a position goes live
    with pytest.raises(BudgetExceeded, match="150 tokens"):
        values.now(core)
    assert core.budgets.spend is not None and core.budgets.spend.tokens == 150
