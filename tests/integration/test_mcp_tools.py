"""MCP tools: ``durably.tool.from_mcp`` follows MCP's defaults for missing hints (a
table), and ``durably.tools.from_mcp_session`` wraps a real in-process ``mcp`` server's
tools: kinds from annotations or ``kinds=``, a warning naming the unannotated tools,
each call a recorded step whose key reaches the server in the request's ``_meta``."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from anthropic.types import Message
from mcp import Client
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations

import durably
from durably.tools import UnannotatedMcpToolsWarning, dispatch, from_mcp_session

# (readOnlyHint, destructiveHint, idempotentHint) -> kind; None: the hint is missing.
TABLE = [
    ((None, None, None), "destructive"),  # MCP defaults: not read-only, destructive
    ((True, None, None), "read"),
    ((True, True, False), "read"),  # read-only wins: the other hints then mean nothing
    ((False, None, None), "destructive"),
    ((False, True, True), "destructive"),  # destructive wins over idempotent
    ((None, False, None), "write"),  # idempotent defaults to false
    ((False, False, False), "write"),
    ((None, False, True), "idempotent"),
    ((False, False, True), "idempotent"),
]


@pytest.mark.parametrize(("hints", "kind"), TABLE)
def test_from_mcp_follows_the_spec_defaults(hints: tuple[Any, ...], kind: str) -> None:
    ro, de, idem = hints
    camel = {
        k: v
        for k, v in (("readOnlyHint", ro), ("destructiveHint", de), ("idempotentHint", idem))
        if v is not None
    }
    assert durably.tool.from_mcp(camel) == kind
    model = ToolAnnotations(read_only_hint=ro, destructive_hint=de, idempotent_hint=idem)
    assert durably.tool.from_mcp(model) == kind
    assert durably.tool.from_mcp(model.model_dump(by_alias=True)) == kind


def test_from_mcp_without_annotations_is_destructive() -> None:
    assert durably.tool.from_mcp(None) == "destructive"


SEEN: list[tuple[str, Any]] = []


def server() -> MCPServer:
    s = MCPServer("shop")

    @s.tool(annotations=ToolAnnotations(read_only_hint=True))
    def search(query: str) -> str:
        """Search the catalogue."""
        return f"3 results for {query}"

    @s.tool(annotations=ToolAnnotations(destructive_hint=False))
    def add_note(order: str, text: str, ctx: Context) -> str:
        """Add a note to an order."""
        SEEN.append(("add_note", (ctx.request_context.meta or {}).get("idempotency_key")))
        return f"noted on {order}"

    @s.tool()
    def wipe(order: str) -> str:
        """Delete an order."""
        SEEN.append(("wipe", order))
        return "wiped"

    return s


def response(calls: list[tuple[str, str, dict[str, Any]]]) -> Message:
    return Message.model_validate(
        {
            "id": "m",
            "type": "message",
            "role": "assistant",
            "model": "claude-test",
            "usage": {"input_tokens": 1, "output_tokens": 1},
            "content": [{"type": "tool_use", "id": i, "name": n, "input": a} for i, n, a in calls],
        }
    )


def test_session_tools_take_kinds_and_warn_about_unannotated_ones() -> None:
    async def main() -> None:
        async with Client(server()) as client:
            with pytest.warns(UnannotatedMcpToolsWarning, match=r"wipe;.*kinds=") as got:
                tools = await from_mcp_session(client)
            assert len(got) == 1
            kinds = {t.name: (t.kind, t.approval) for t in tools}
            assert kinds == {
                "search": ("read", False),
                "add_note": ("write", False),
                "wipe": ("destructive", True),
            }
            schema = next(t for t in tools if t.name == "add_note").anthropic_schema()
            assert schema["description"] == "Add a note to an order."
            assert set(schema["input_schema"]["properties"]) == {"order", "text"}
            tools = await from_mcp_session(client, kinds={"wipe": "write"})  # no warning
            assert {t.name: t.kind for t in tools}["wipe"] == "write"
            with pytest.raises(durably.ConfigError, match="does not list: nope"):
                await from_mcp_session(client, kinds={"nope": "read"})
            with pytest.raises(durably.ConfigError, match="kinds\\['wipe'\\]"):
                await from_mcp_session(client, kinds={"wipe": "danger"})

    asyncio.run(main())


def test_session_calls_are_steps_with_the_key_in_meta(tmp_path: Path) -> None:
    SEEN.clear()
    url = f"sqlite:///{tmp_path}/journal.db"

    async def main() -> tuple[Any, list[Any], Any]:
        async with Client(server()) as client:
            with pytest.warns(UnannotatedMcpToolsWarning):
                tools = await from_mcp_session(client)
            with durably.Engine(url, park_wait_s=0) as engine:

                @engine.workflow(name="shop")
                async def shop(ctx: durably.AsyncContext) -> Any:
                    return await dispatch(
                        ctx,
                        response(
                            [
                                ("t1", "search", {"query": "boots"}),
                                ("t2", "add_note", {"order": "A-1", "text": "gift"}),
                                ("t3", "add_note", {"order": 7}),  # bad: wrong type, missing
                            ]
                        ),
                        tools,
                    )

                first = await engine.run_async(shop, run_id="s1")
                again = await engine.run_async(shop, run_id="s1")  # replayed
                return first, engine.history("s1"), again

    first, history, again = asyncio.run(main())
    [msg] = first
    texts = [(b["tool_use_id"], b["content"], b.get("is_error", False)) for b in msg["content"]]
    assert texts[:2] == [("t1", "3 results for boots", False), ("t2", "noted on A-1", False)]
    assert texts[2][2] and "order" in texts[2][1] and "text: Field required" in texts[2][1]
    assert again == first
    # add_note ran once; its key reached the server in _meta and is the step's key.
    [(name, key)] = SEEN
    assert name == "add_note" and key is not None and key.endswith(":0.1.0")
    assert [(h.position, h.name) for h in history if h.status == "ok"][-2:] == [
        ("0.0.0", "search"),
        ("0.1.0", "add_note"),
    ]


def test_an_unannotated_session_tool_parks_for_approval(tmp_path: Path) -> None:
    SEEN.clear()
    url = f"sqlite:///{tmp_path}/journal.db"

    async def main() -> list[durably.PendingApproval]:
        async with Client(server()) as client:
            with pytest.warns(UnannotatedMcpToolsWarning):
                tools = await from_mcp_session(client)
            wipe = next(t for t in tools if t.name == "wipe")
            with durably.Engine(url, park_wait_s=0) as engine:

                @engine.workflow(name="shop")
                async def shop(ctx: durably.AsyncContext) -> Any:
                    return await wipe(order="A-9")

                with pytest.raises(durably.RunParked):
                    await engine.run_async(shop, run_id="w")
                return engine.pending_approvals()

    [p] = asyncio.run(main())
    assert (p.action, p.args) == ("wipe", {"order": "A-9"})
    assert SEEN == []
