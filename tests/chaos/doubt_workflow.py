"""A workflow whose only effect is declared but takes no key: a crash mid-effect parks it."""

from __future__ import annotations

import durably

engine = durably.Engine("sqlite:///:memory:")


def plan(n: int) -> int:
    """Pure computation, safe to repeat."""
    return n * 2


@durably.step(effect=True)
def charge_card(cents: int) -> str:
    """An effect with neither idempotency key nor reconcile."""
    return f"charged {cents}"


@engine.workflow(name="charge")
def charge(ctx: durably.Context, n: int) -> str:
    """Plan, then charge."""
    cents = ctx.step("plan", plan, n)
    return ctx.step("charge_card", charge_card, cents)
