"""Tools that know their effect: :func:`durably.tool` (also ``durably.tools.tool``),
:func:`dispatch` for the tool calls of a model response, :func:`from_mcp` and
:func:`from_mcp_session` for MCP servers. See docs/tools.md.
"""

from __future__ import annotations

from ._tool import KINDS, Kind, Tool, ToolDecorator, UnsafeToolWarning, from_mcp, tool
from .dispatch import ToolCall, dispatch
from .mcp import McpToolError, UnannotatedMcpToolsWarning, from_mcp_session

__all__ = [
    "KINDS",
    "Kind",
    "McpToolError",
    "Tool",
    "ToolCall",
    "ToolDecorator",
    "UnannotatedMcpToolsWarning",
    "UnsafeToolWarning",
    "dispatch",
    "from_mcp",
    "from_mcp_session",
    "tool",
]
