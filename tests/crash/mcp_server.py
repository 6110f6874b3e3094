"""An MCP server over stdio for the crash test of ``from_mcp_session``: one write tool,
``add_note``, that deduplicates on the idempotency key durably sends in the request's
``_meta``. Every call is logged (key, pid) in the world database ``MCP_WORLD``."""

from __future__ import annotations

import os
import sqlite3

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("notes")


@server.tool(annotations=ToolAnnotations(destructive_hint=False))
def add_note(order: str, text: str, ctx: Context) -> str:
    """Add a note to an order."""
    key = str((ctx.request_context.meta or {}).get("idempotency_key"))
    with sqlite3.connect(os.environ["MCP_WORLD"], isolation_level=None, timeout=10) as w:
        w.execute("CREATE TABLE IF NOT EXISTS calls (key TEXT, pid INT)")
        w.execute("CREATE TABLE IF NOT EXISTS notes (key TEXT PRIMARY KEY, text TEXT)")
        w.execute("INSERT INTO calls VALUES (?, ?)", (key, os.getppid()))
        w.execute("INSERT OR IGNORE INTO notes VALUES (?, ?)", (key, f"{order}: {text}"))
    return f"noted on {order}"


if __name__ == "__main__":
    server.run("stdio")
