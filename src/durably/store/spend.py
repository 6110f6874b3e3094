"""The spend role, written once: the ledger and the run's budget (over the :mod:`.tx`
protocol)."""

from __future__ import annotations

from ..budget import Budget, Spend, SpendEntry
from ..errors import LeaseLost
from .rules import budget_params, spend_from_row, spend_params
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
