"""The spend role, written once: the ledger and the run's budget (over the :mod:`.tx`
protocol)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ..budget import Budget, Spend, SpendEntry
from ..errors import ConfigError, LeaseLost, NotADurablyDatabase
from .tx import Backend, Tx


class SpendLedger(Backend):
    """Store methods of the spend role (see :class:`~durably.store.base.Store`)."""

    def record_spend(self, run_id: str, entry: SpendEntry) -> Spend:
        """Add one call's usage to the ledger once per entry; the run's spend after it."""
        params = spend_params(run_id, entry, self.clock.time())

        def op(tx: Tx) -> Spend:
            # Each statement is safe on its own: the entry makes a retried insert a no-op.
            tx.q("insert_spend", **params)
            return spend_from_row(tx.one("get_spend", run_id=run_id))

        return self._writing(op, atomic=False)

    def get_spend(self, run_id: str) -> Spend:
        """The run's spend and stored budget."""
        return self._reading(lambda tx: spend_from_row(tx.one("get_spend", run_id=run_id)))

    def set_budget(self, run_id: str, token: int, budget: Budget) -> None:
        """Store the run's budget (fenced: LeaseLost on a stale token)."""
        params = budget_params(run_id, token, budget, self.clock.time())

        def op(tx: Tx) -> None:
            if tx.q("set_budget", **params).rowcount != 1:
                raise LeaseLost(run_id, token)

        self._writing(op, atomic=False)


def spend_params(run_id: str, entry: SpendEntry, now: float) -> dict[str, Any]:
    """The named parameters of a ledger row (``insert_spend``)."""
    return {
        "run_id": run_id,
        "entry": entry.entry,
        "generation": entry.generation,
        "position": entry.position,
        "attempt": entry.attempt,
        "token": entry.token,
        "tokens": entry.tokens,
        "input_tokens": entry.input_tokens,
        "output_tokens": entry.output_tokens,
        "cost_usd": entry.cost_usd,
        "now": now,
    }


def budget_params(run_id: str, token: int, budget: Budget, now: float) -> dict[str, Any]:
    """The named parameters of ``set_budget``."""
    return {
        "run_id": run_id,
        "token": token,
        "tokens": budget.tokens,
        "cost_usd": budget.cost_usd,
        "now": now,
    }


def spend_from_row(row: Sequence[Any] | None) -> Spend:
    """A ``get_spend`` row as a :class:`Spend` (a hand-edited row that does not make a
    budget is shown as no budget rather than trusted)."""
    if row is None:
        return Spend()
    tokens, ins, outs, cost, entries, has_budget, b_tokens, b_cost = row
    budget = None
    if has_budget:
        try:
            budget = Budget(b_tokens, None if b_cost is None else float(b_cost))
        except ConfigError:
            budget = None
    try:
        spend = Spend(int(tokens), int(ins), int(outs), float(cost), int(entries), budget)
    except (TypeError, ValueError, OverflowError) as exc:
        raise NotADurablyDatabase(
            f"the spend ledger holds a value that is not a number ({exc}); repair the row"
            " or restore the journal from a backup"
        ) from exc
    # Every row the ledger writes is a finite amount >= 0: a NaN (PostgreSQL keeps one)
    # would make every later sum NaN and the budget never trigger; a negative amount
    # would silently give a run more budget. Both come from a hand edit.
    sums = (spend.tokens, spend.input_tokens, spend.output_tokens, spend.cost_usd)
    if not all(math.isfinite(v) and v >= 0 for v in sums):
        raise NotADurablyDatabase(
            f"the spend ledger sums to tokens={spend.tokens}, input_tokens="
            f"{spend.input_tokens}, output_tokens={spend.output_tokens}, cost_usd="
            f"{spend.cost_usd}: a row holds a negative or non-finite amount (a hand"
            " edit; durably writes none). Repair the spend rows or restore the journal"
            " from a backup"
        )
    return spend
