"""A workflow whose result holds recorded now/random/uuid values (for chaos tests)."""

from __future__ import annotations

import durably

# Only registers the workflow: `durably chaos` drives it on engines of its own.
engine = durably.Engine("sqlite:///:memory:")


def _note(text: str) -> str:
    return text


@engine.workflow(name="stamped")
def stamped(ctx: durably.Context) -> dict[str, object]:
    when = ctx.now()
    ticket = f"ticket-{ctx.uuid()}"
    note = ctx.step("note", _note, "hello")
    return {"at": when, "ticket": ticket, "score": ctx.random(), "note": note}
