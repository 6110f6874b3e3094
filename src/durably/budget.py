"""Budgets and the spend ledger.

A step reports what a call cost with :func:`durably.usage`; every call that reported
usage becomes one ledger row (:class:`SpendEntry`), committed right after the call
returned and before the step's result, so spend survives a crash in between. A run's spend
(:class:`Spend`) is the ledger's sum across generations: a replayed step is not called,
so it adds nothing; a call repeated after a crash, or a failed attempt that was retried,
really happened and is counted. A :class:`Budget` (``ctx.budget(...)`` or the workflow's
``budget=`` option) limits that sum; crossing it stops the run with
:class:`durably.BudgetExceeded` at its next recording call.
"""

from __future__ import annotations

import math

from ._record import Record, set_field
from .errors import ConfigError
from .limits import COST_USD_MAX as COST_USD_MAX
from .limits import TOKENS_MAX as TOKENS_MAX
from .shell import command

NEAR_FRACTION = 0.8
"""``runs why`` says a running run is near its budget once it spent this much of it."""


def check_tokens(value: object, what: str) -> int:
    """``value`` as a token count: an int from 0 to TOKENS_MAX, else a ConfigError naming
    ``what``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{what} must be a whole number of tokens (an int >= 0), got {value!r}")
    if not 0 <= value <= TOKENS_MAX:
        raise ConfigError(f"{what} must be from 0 to {TOKENS_MAX:,}, got {value!r}")
    return value


def check_cost(value: object, what: str) -> float:
    """``value`` as US dollars: a finite number from 0 to COST_USD_MAX, else a
    ConfigError naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{what} must be a number of US dollars (>= 0), got {value!r}")
    cost = float(value)
    if not math.isfinite(cost) or not 0 <= cost <= COST_USD_MAX:
        raise ConfigError(
            f"{what} must be a finite number from 0 to {COST_USD_MAX:g}, got {value!r}"
        )
    return cost


class Budget(Record, frozen=True):
    """A run's spending limit: at most ``tokens`` tokens and ``cost_usd`` US dollars over
    the whole run, across generations (None: no limit on that measure).

    Give it as ``@engine.workflow(..., budget=durably.Budget(tokens=..., cost_usd=...))``
    or with ``ctx.budget(tokens=..., cost_usd=...)`` at the top of the workflow; the run
    stops with ``durably.BudgetExceeded`` once its spend is more than a limit.
    """

    __slots__ = ("cost_usd", "tokens")

    tokens: int | None
    cost_usd: float | None

    def __init__(self, tokens: int | None = None, cost_usd: float | None = None) -> None:
        if tokens is not None:
            check_tokens(tokens, "Budget(tokens=...)")
        if cost_usd is not None:
            cost_usd = check_cost(cost_usd, "Budget(cost_usd=...)")
        set_field(self, "tokens", tokens)
        set_field(self, "cost_usd", cost_usd)


class SpendEntry(Record, frozen=True):
    """One ledger row: the usage one call of a step function reported.

    ``entry`` names the call: the same text for a write retried after an unknown outcome
    (stored once), another for the same position called again by a later claim.
    """

    __slots__ = (
        "attempt",
        "cost_usd",
        "entry",
        "generation",
        "input_tokens",
        "output_tokens",
        "position",
        "token",
        "tokens",
    )

    entry: str
    generation: int
    position: str
    attempt: int
    token: int
    tokens: int
    input_tokens: int | None
    output_tokens: int | None
    cost_usd: float

    def __init__(
        self,
        entry: str,
        generation: int,
        position: str,
        attempt: int,
        token: int,
        tokens: int,
        input_tokens: int | None,
        output_tokens: int | None,
        cost_usd: float,
    ) -> None:
        set_field(self, "entry", entry)
        set_field(self, "generation", generation)
        set_field(self, "position", position)
        set_field(self, "attempt", attempt)
        set_field(self, "token", token)
        set_field(self, "tokens", tokens)
        set_field(self, "input_tokens", input_tokens)
        set_field(self, "output_tokens", output_tokens)
        set_field(self, "cost_usd", cost_usd)


class Spend(Record, frozen=True):
    """A run's spend (the ledger's sums) and its stored budget (None: none stored)."""

    __slots__ = ("budget", "cost_usd", "entries", "input_tokens", "output_tokens", "tokens")

    tokens: int
    input_tokens: int
    output_tokens: int
    cost_usd: float
    entries: int
    budget: Budget | None

    def __init__(
        self,
        tokens: int = 0,
        input_tokens: int = 0,
        output_tokens: int = 0,
        cost_usd: float = 0.0,
        entries: int = 0,
        budget: Budget | None = None,
    ) -> None:
        set_field(self, "tokens", tokens)
        set_field(self, "input_tokens", input_tokens)
        set_field(self, "output_tokens", output_tokens)
        set_field(self, "cost_usd", cost_usd)
        set_field(self, "entries", entries)
        set_field(self, "budget", budget)

    def over(self, budget: Budget | None) -> str | None:
        """How this spend passes ``budget`` (for BudgetExceeded), or None when it does
        not: more than a limit, not equal to it."""
        if budget is None:
            return None
        parts = []
        if budget.tokens is not None and self.tokens > budget.tokens:
            parts.append(f"{self.tokens:,} tokens, more than its budget of {budget.tokens:,}")
        if budget.cost_usd is not None and self.cost_usd > budget.cost_usd:
            parts.append(f"${self.cost_usd:,.4f}, more than its budget of ${budget.cost_usd:,.4f}")
        return " and ".join(parts) or None

    def fraction(self, budget: Budget | None) -> float | None:
        """The largest share of a limit spent (1.0: all of it), or None without limits."""
        if budget is None:
            return None
        shares = []
        if budget.tokens is not None:
            shares.append(_share(self.tokens, budget.tokens))
        if budget.cost_usd is not None:
            shares.append(_share(self.cost_usd, budget.cost_usd))
        return max(shares) if shares else None

    def text(self, budget: Budget | None = None) -> str:
        """``tokens 12,400 of 10,000 (124%), cost $0.41 of $0.50 (82%)`` (``budget``: the
        one to compare with, by default the stored one); a measure without a limit shows
        its spend alone; input and output tokens follow when steps reported them."""
        budget = budget if budget is not None else self.budget
        tokens = f"tokens {self.tokens:,}"
        if budget is not None and budget.tokens is not None:
            tokens += f" of {budget.tokens:,} ({_percent(self.tokens, budget.tokens)})"
        cost = f"cost ${self.cost_usd:,.2f}"
        if budget is not None and budget.cost_usd is not None:
            cost += f" of ${budget.cost_usd:,.2f} ({_percent(self.cost_usd, budget.cost_usd)})"
        split = ""
        if self.input_tokens or self.output_tokens:
            split = f"; input {self.input_tokens:,}, output {self.output_tokens:,} tokens"
        return f"{tokens}, {cost}{split}"


def _share(spent: float, limit: float) -> float:
    if limit <= 0:
        return math.inf if spent > 0 else 0.0
    return spent / limit


def _percent(spent: float, limit: float) -> str:
    share = _share(spent, limit)
    return "over a limit of 0" if math.isinf(share) else f"{share * 100:.0f}%"


def exceeded_message(run_id: str, how: str) -> str:
    """BudgetExceeded's message: what was spent against which limit, and what to do."""
    return (
        f"run {run_id!r} spent {how}, so it stopped at its next recording call. Its recorded"
        " steps are kept; to go on with a larger budget, raise it (ctx.budget or the"
        f" workflow's budget=) and `{command('fork', run_id, options='--at N')}`, N the"
        f" position it stopped at (`{command('runs why', run_id)}` names it)"
    )
