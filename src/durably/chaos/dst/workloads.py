"""The workload catalog: real workflows the simulated workers drive.

Each :class:`Workload` is a workflow function (registered in every simulated process's
engine), how to draw its input, which signals its waits take, and how to check a run of it
that ended: the result an uncrashed run gives. Adding a workload is one function and one
``Workload(...)`` line in :data:`CATALOG`. The step functions reach the simulation's
:class:`~durably.chaos.dst.world.World` through :func:`world`.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import durably

from .world import World

_WORLD: list[World] = []


def world() -> World:
    """The world of the simulation running now."""
    return _WORLD[0]


def set_world(w: World | None) -> None:
    """Install (or, with None, remove) the world the step functions reach."""
    _WORLD.clear()
    if w is not None:
        _WORLD.append(w)


# -- step functions ------------------------------------------------------------------------


def compute(x: int) -> int:
    """A pure step: its execution is counted, its value a function of its input."""
    world().execute()
    return x * 2 + 1


@durably.step(effect=True, on_doubt="retry")
def pay(amount: int, idempotency_key: str) -> str:
    """A keyed effect (a payment): the world applies it once per key."""
    return world().apply(idempotency_key, amount)


@durably.step(retries=3, backoff=0.5, backoff_max_s=2.0)
def flaky(x: int) -> int:
    """Fails its first two attempts (retries), then returns."""
    attempt = world().execute()[3]
    if attempt < 3:
        raise RuntimeError(f"flaky attempt {attempt}")
    return x + 100


def think(x: int) -> int:
    """A model call: reports 7 tokens of spend for its attempt."""
    world().execute()
    durably.usage(tokens=7, cost_usd=0.0)
    world().charged(7)
    return x


@durably.step(effect=True, on_doubt="retry")
def book(item: str, idempotency_key: str) -> str:
    """A saga's booking (keyed effect)."""
    return world().apply(idempotency_key, item)


@durably.step(effect=True, on_doubt="retry")
def unbook(item: str, idempotency_key: str) -> str:
    """A saga's compensation (keyed effect)."""
    return world().apply(idempotency_key, "undo " + item)


def refuse(item: str) -> str:
    """A booking the provider refuses for good."""
    world().execute()
    raise ValueError(f"no {item} left")


# -- workflows -----------------------------------------------------------------------------


def chain(ctx: durably.Context, n: int) -> int:
    """Steps, a keyed effect, a retried step, a timer."""
    total = 0
    for i in range(n):
        total += ctx.step(f"s{i}", compute, i)
    ctx.step("pay", pay, total)
    total += ctx.step("flaky", flaky, 1)
    ctx.sleep(0.5)
    total += ctx.step("last", compute, total)
    return total


def chain_expect(n: int) -> int:
    total = sum(i * 2 + 1 for i in range(n)) + 101
    return total + total * 2 + 1


def waits(ctx: durably.Context, k: int) -> list[Any]:
    """Waits for ``k`` signals ``go`` (the last with a timeout), a step between each."""
    got: list[Any] = []
    for i in range(k):
        got.append(ctx.wait_for_signal("go", timeout_s=30.0 if i == k - 1 else None))
        ctx.step(f"after{i}", compute, i)
    return got


def approval(ctx: durably.Context, amount: int) -> dict[str, Any]:
    """An approval that may expire; a keyed effect when approved."""
    d = ctx.request_approval("refund", {"amount": amount}, timeout_s=8.0)
    paid = ctx.step("refund", pay, amount) if d.approved else None
    return {"outcome": d.outcome, "paid": paid}


def trip(ctx: durably.Context, fail: bool) -> str:
    """A saga: two bookings, a third that may fail for good (compensated, most recent
    first)."""
    with ctx.saga() as saga:
        saga.step("hotel", book, unbook, "hotel")
        saga.step("car", book, unbook, "car")
        if fail:
            saga.step("boat", refuse, unbook, "boat")
        ctx.step("confirm", compute, 1)
    return "booked"


def spender(ctx: durably.Context, n: int) -> int:
    """Model calls under a budget of 20 tokens: the third one crosses it."""
    ctx.budget(tokens=20)
    for i in range(n):
        ctx.step(f"think{i}", think, i)
    return n


def fan(ctx: durably.Context, n: int) -> list[int]:
    """Ordered branches entered in an order the world draws (as threads would)."""
    group = ctx.branches([f"b{i}" for i in range(n)])
    out = [0] * n
    for i in world().order(n):  # the simulation's seeded draw
        with group.branch(i):
            out[i] = ctx.step("leaf", compute, i) + ctx.step("leaf2", compute, i)
    return out


def mailbox(ctx: durably.Context, n: int, done: int = 0, total: int = 0) -> int:
    """A long-lived loop: two steps and a keyed effect per generation, then
    ``continue_as_new`` with the state carried, until ``n`` items are done."""
    for i in range(2):
        total += ctx.step(f"m{i}", compute, done + i)
    ctx.step("ack", pay, done)
    done += 2
    if done >= n:
        return total
    return ctx.continue_as_new(n, done, total)


@dataclass(frozen=True)
class Workload:
    """One kind of run the callers start."""

    name: str
    fn: Callable[..., Any]
    draw: Callable[[random.Random], tuple[Any, ...]]
    expect: Callable[..., Any] | None = None  # the uncrashed result from the input
    signals: tuple[str, ...] = ()
    approvals: bool = False
    may_fail: bool = False  # ends failed on purpose for some inputs
    weight: int = 1


CATALOG: tuple[Workload, ...] = (
    Workload("chain", chain, lambda r: (r.randint(6, 20),), chain_expect, weight=3),
    Workload("waits", waits, lambda r: (r.randint(1, 3),), signals=("go",), weight=2),
    Workload("approval", approval, lambda r: (r.randint(1, 99),), approvals=True, weight=2),
    Workload("trip", trip, lambda r: (r.random() < 0.4,), may_fail=True),
    Workload("spender", spender, lambda r: (r.randint(1, 4),), may_fail=True),
    Workload(
        "fan",
        fan,
        lambda r: (r.randint(2, 3),),
        lambda n: [i * 2 + 1 + i * 2 + 1 for i in range(n)],
    ),
    Workload(
        "mailbox",
        mailbox,
        lambda r: (2 * r.randint(2, 4),),
        lambda n: sum(k * 2 + 1 for k in range(n)),
    ),
)
"""Every workload; a new one is a function above and a line here."""
