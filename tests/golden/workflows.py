"""The workflows whose runs the golden journals hold, one per capability.

``make_golden.py`` runs each once on a fresh SQLite journal and writes what the journal
then holds to ``journals/<name>.json``; ``test_golden.py`` loads those files into fresh
journals and replays them against this same code. Changing a workflow here changes
what its journal must replay: regenerate (``python tests/golden/make_golden.py``) only on
purpose, when the recorded format itself is meant to change, and say why in the commit.

Each workflow appends ``(name, what it returns or raises)`` to ``REACHED`` when its body
reaches its end, so a test sees that a replay went through the whole recorded history
(a replay that stopped early, where the history seemed to end, never appends).
"""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal
from typing import Any

import durably

REACHED: list[tuple[str, Any]] = []

# Text long enough (> durably.limits.INLINE_CHARS_MAX) to be kept as a blob.
BRIEF = (
    "Summarise the incident for the on-call engineer: the database failover at 03:12 UTC,"
    " what paged, what was restarted, and what is still degraded."
)
# A step output past durably.limits.OUTPUT_INLINE_BYTES_MAX (64 KiB): kept in the blob
# table, the record holding a reference.
LARGE_OUTPUT_CHARS = 66_000


# --- Step functions (deterministic, so a regenerated journal differs only in ids) --------


def plan(topic: str) -> dict[str, Any]:
    """A plain recorded step (a model call stands in)."""
    return {"title": f"incident: {topic}", "steps": 3}


@durably.step(effect=True)
def open_ticket(title: str, *, idempotency_key: str) -> dict[str, Any]:
    """An effect that takes the step's key; it returns the key so the journal holds the
    key the receiving side saw (the test checks it against ``RunRecord.key``)."""
    return {"ticket": "T-1", "title": title, "key": idempotency_key}


@durably.step(effect=True)
def charge(amount: int, *, idempotency_key: str) -> dict[str, Any]:
    """An effect with a key, as in the gather and legacy workflows."""
    return {"charged": amount, "key": idempotency_key}


@durably.step(retries=1, backoff=0.0)
def flaky_lookup(host: str) -> str:
    """Fails every attempt: its final failure is recorded and replays as StepFailed."""
    raise LookupError(f"no route to {host}")


def book(what: str, *, idempotency_key: str) -> dict[str, Any]:
    """A saga's do-step."""
    return {"booked": what, "key": idempotency_key}


def unbook(what: str, *, idempotency_key: str, result: dict[str, Any]) -> dict[str, Any]:
    """A saga's compensation: gets do's arguments and its recorded result."""
    return {"unbooked": result["booked"], "key": idempotency_key}


def book_hotel(city: str, *, idempotency_key: str) -> dict[str, Any]:
    """A saga step that fails for good: compensation follows."""
    raise RuntimeError(f"no hotel left in {city}")


def model_call(prompt: str, tokens_in: int, tokens_out: int) -> str:
    """A step that reports its spend to the run's ledger."""
    durably.usage(input_tokens=tokens_in, output_tokens=tokens_out, cost_usd=0.0125)
    return f"answer to {prompt}"


def summarise(brief: str, conversation: list[dict[str, str]]) -> dict[str, Any]:
    """A step called with a long argument and a conversation (both kept as blobs)."""
    return {"turns": len(conversation), "brief_chars": len(brief)}


def big_report(size: int) -> str:
    """A step whose output is past the inline limit (kept as a blob)."""
    return ("report " * (size // 7 + 1))[:size]


def refund_payment(order: str, amount: int, *, idempotency_key: str) -> dict[str, Any]:
    """What an approved request lets happen."""
    return {"refunded": order, "amount": amount, "key": idempotency_key}


def page(who: str) -> str:
    """A step after a park."""
    return f"paged {who}"


def every_tagged_value() -> dict[str, Any]:
    """One value of each type the codec writes with a ``$`` tag (``durably.codec``): the
    ``values`` golden takes them as input and as step arguments, and records them as a
    step's output, so renaming a tag or changing its form fails the golden test."""
    return {
        "bytes": b"\x00\xffdurably",
        "tuple": (1, "a"),
        "set": {3, 1, 2},
        "frozenset": frozenset({"x"}),
        "datetime": dt.datetime(2026, 11, 30, 9, 0, 15, 250, tzinfo=dt.UTC),
        "date": dt.date(2026, 11, 30),
        "time": dt.time(9, 30, 15),
        "timedelta": dt.timedelta(days=1, seconds=2, microseconds=5),
        "decimal": Decimal("12.340"),
        "uuid": uuid.UUID("12345678-1234-5678-1234-567812345678"),
        "nan": float("nan"),
        "inf": float("-inf"),
        "map": {1: "one", (2, 3): "pair"},
        "dollar": {"$ref": "a user key that only looks like a tag"},
    }


def echo_values(values: dict[str, Any]) -> dict[str, Any]:
    """A step whose arguments and output hold every tagged type."""
    return {"given": values, "made": every_tagged_value()}


# --- The workflows ---------------------------------------------------------------------


def register(engine: durably.Engine) -> dict[str, durably.Workflow]:
    """Register every golden workflow on ``engine``; returns them by golden name."""

    @engine.workflow(name="golden.steps")
    def steps(ctx: durably.Context, topic: str) -> dict[str, Any]:
        p = ctx.step("plan", plan, topic)
        ctx.emit("progress", {"planned": p["title"]})
        at = ctx.now()
        r = ctx.random()
        u = ctx.uuid()
        ticket = ctx.step("open_ticket", open_ticket, p["title"])
        try:
            ctx.step("lookup", flaky_lookup, "db-1")
            looked = "found"
        except durably.StepFailed as exc:
            looked = f"{exc.type_name}: {exc.message}"
        out = {
            "ticket": ticket,
            "at": at.isoformat(),
            "random": r,
            "uuid": str(u),
            "lookup": looked,
        }
        REACHED.append(("steps", out))
        return out

    @engine.workflow(name="golden.gather")
    async def gather(ctx: durably.AsyncContext, n: int) -> list[Any]:
        first = await ctx.step("plan", plan, "fan-out")
        results = await ctx.gather(
            ctx.step("charge_a", charge, n),
            ctx.step("charge_b", charge, n + 1),
            ctx.step("plan_b", plan, "branch"),
        )
        out = [first["title"], *results]
        REACHED.append(("gather", out))
        return out

    @engine.workflow(name="golden.timers")
    def timers(ctx: durably.Context) -> str:
        ctx.sleep(0)  # already due: an ok record with its wake time
        ctx.sleep(3600)  # parks; the fake clock moves to the wake time
        done = ctx.step("page", page, "ana")
        REACHED.append(("timers", done))
        return done

    @engine.workflow(name="golden.signals")
    def signals(ctx: durably.Context) -> dict[str, Any]:
        got = ctx.wait_for_signal("approve", timeout_s=600)
        late = ctx.wait_for_signal("late", timeout_s=60, default="no answer")
        out = {"approve": got, "late": late}
        REACHED.append(("signals", out))
        return out

    @engine.workflow(name="golden.approvals")
    def approvals(ctx: durably.Context, order: str, amount: int) -> dict[str, Any]:
        d = ctx.request_approval("refund", {"order": order, "amount": amount}, timeout_s=86400)
        if not d.approved:
            out: dict[str, Any] = {"refused": d.outcome}
        else:
            out = ctx.step("refund", refund_payment, order, amount)
            out = {**out, "by": d.by, "note": d.note}
        REACHED.append(("approvals", out))
        return out

    @engine.workflow(name="golden.sagas")
    def sagas(ctx: durably.Context, city: str) -> str:
        try:
            with ctx.saga() as saga:
                saga.step("flight", book, unbook, f"flight to {city}")
                saga.step("hotel", book_hotel, unbook, city)
            out = "booked"
        except durably.StepFailed as exc:
            out = f"compensated after {exc.type_name}: {exc.message}"
        REACHED.append(("sagas", out))
        return out

    @engine.workflow(name="golden.budgets")
    def budgets(ctx: durably.Context) -> list[str]:
        ctx.budget(tokens=10_000, cost_usd=1.0)
        out = [
            ctx.step("draft", model_call, "draft", 120, 40),
            ctx.step("review", model_call, "review", 200, 60),
        ]
        REACHED.append(("budgets", out))
        return out

    @engine.workflow(name="golden.patched")
    def patched(ctx: durably.Context) -> str:
        if ctx.patched("prompt-v2"):
            out = str(ctx.step("plan_v2", plan, "patched")["title"])
        else:
            out = str(ctx.step("plan", plan, "old")["title"])
        REACHED.append(("patched", out))
        return out

    @engine.workflow(name="golden.blobs")
    def blobs(ctx: durably.Context) -> dict[str, Any]:
        conversation = [
            {"role": "system", "content": "You are the incident assistant."},
            {"role": "user", "content": BRIEF},
        ]
        first = ctx.step("summarise", summarise, BRIEF, conversation)
        conversation = [*conversation, {"role": "assistant", "content": "Summary follows."}]
        second = ctx.step("summarise", summarise, BRIEF, conversation)
        report = ctx.step("report", big_report, LARGE_OUTPUT_CHARS)
        out = {"first": first, "second": second, "report_chars": len(report)}
        REACHED.append(("blobs", out))
        return out

    @engine.workflow(name="golden.halts")
    def halts(ctx: durably.Context) -> str:
        ctx.step("plan", plan, "to be cancelled")
        try:
            ctx.sleep(3600)  # parked here when the cancel lands: it unwinds from here
        except durably.Cancelled as exc:
            REACHED.append(("halts", f"cancelled: {exc.reason}"))
            raise
        return "not reached"

    @engine.workflow(name="golden.legacy_keys")
    def legacy_keys(ctx: durably.Context) -> dict[str, Any]:
        p = ctx.step("plan", plan, "legacy")
        out = ctx.step("open_ticket", open_ticket, p["title"])
        REACHED.append(("legacy_keys", out))
        return out

    @engine.workflow(name="golden.legacy_gather_keys")
    async def legacy_gather_keys(ctx: durably.AsyncContext) -> list[Any]:
        await ctx.step("plan", plan, "legacy gather")
        out = await ctx.gather(ctx.step("charge_a", charge, 1), ctx.step("charge_b", charge, 2))
        REACHED.append(("legacy_gather_keys", out))
        return out

    @engine.workflow(name="golden.budget_stop")
    def budget_stop(ctx: durably.Context) -> str:
        ctx.budget(tokens=100)
        ctx.step("draft", model_call, "draft", 120, 40)
        try:
            ctx.step("review", model_call, "review", 200, 60)  # a budget halt is recorded
        except durably.BudgetExceeded as exc:
            REACHED.append(("budget_stop", f"{type(exc).__name__}: {exc}"))
            raise
        return "not reached"

    @engine.workflow(name="golden.values")
    def values(ctx: durably.Context, given: dict[str, Any]) -> dict[str, Any]:
        out = ctx.step("echo", echo_values, given)
        REACHED.append(("values", out))
        return out

    return {
        "steps": steps,
        "gather": gather,
        "timers": timers,
        "signals": signals,
        "approvals": approvals,
        "sagas": sagas,
        "budgets": budgets,
        "patched": patched,
        "blobs": blobs,
        "halts": halts,
        "legacy_keys": legacy_keys,
        "legacy_gather_keys": legacy_gather_keys,
        "values": values,
        "budget_stop": budget_stop,
    }
