"""Budgets (``ctx.budget``, the workflow's ``budget=``): this claim's limit on the run's
spend, stored when it changes. Charging each call's usage to the ledger and checking it
are part of running a step, so they stay in the kernel (``RunCore.charge``,
``RunCore.check_budget``); the model (:class:`~durably.Budget`, :class:`~durably.Spend`)
is :mod:`durably.budget`, which the stores also use.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any

from .._record import replace
from ..budget import Budget
from ..errors import ConfigError
from ..replay.ops import Op, ReadSpend, SetBudget
from ..steps import given_text

if TYPE_CHECKING:
    from ..replay.kernel import RunCore


def set_budget(core: RunCore, budget: Budget) -> Generator[Op, Any, None]:
    """``ctx.budget`` / the workflow's ``budget=``: this claim's limit (the latest call
    wins), stored when it differs from the stored one (so a replay that sets the same
    budget again writes nothing), then checked against the run's spend. It consumes
    no position and may be called after a halt (it records nothing in the history)."""
    core.guard(halt=False)
    if not isinstance(budget, Budget):
        raise ConfigError(f"a budget is a durably.Budget, got {given_text(budget)}")
    state = core.budgets
    state.limit = budget
    if core.checking:
        return  # replay --check writes nothing and never goes live
    if state.spend is None:
        state.spend = yield ReadSpend()
    if state.spend.budget != budget:
        yield SetBudget(budget)
        state.spend = replace(state.spend, budget=budget)
    core.check_budget()
