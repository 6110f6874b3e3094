"""A workflow of declared tools for ``durably chaos --workflow``: a read and an
idempotent tool without keys (they may repeat), a keyed write, a signal wait and a
destructive tool that asks for an approval first (the harness answers both)."""

from __future__ import annotations

import durably

engine = durably.Engine()


@durably.tool(kind="read")
def search(query: str) -> list[str]:
    """Search the catalogue."""
    return [f"{query}-1", f"{query}-2"]


@durably.tool(kind="idempotent")
def set_tag(item: str, tag: str) -> str:
    """Set a tag (setting it twice is the same as once)."""
    return f"{item}:{tag}"


@durably.tool(kind="write")
def order(item: str, idempotency_key: str) -> str:
    """Order an item."""
    return f"ordered {item}"


@durably.tool(kind="destructive")
def cancel_others(item: str, idempotency_key: str) -> str:
    """Cancel every other order (a person approves first)."""
    return f"cancelled all but {item}"


@engine.workflow(name="shop")
def shop(ctx: durably.Context, query: str) -> list[str]:
    [first, _] = search(query)
    tagged = set_tag(first, "chosen")
    ctx.wait_for_signal("go", timeout_s=600)
    done = order(first)
    return [tagged, done, cancel_others(first)]
