"""Tools that know their effect: :func:`durably.tool` (also ``durably.tools.tool``),
:func:`dispatch` for the tool calls of a model response, :func:`from_mcp` and
:func:`from_mcp_session` for MCP servers. See docs/tools.md.

``import durably`` loads only the decorator: ``dispatch`` and the MCP session wrapper
load on first use (resume time, import to first live step, is a target).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._tool import KINDS, Kind, Tool, ToolDecorator, UnsafeToolWarning, from_mcp, tool

if TYPE_CHECKING:
    from ._dispatch import ToolCall, dispatch
    from .mcp import McpToolError, UnannotatedMcpToolsWarning, from_mcp_session

# name -> the module that defines it, imported when the name is first used.
_LAZY = {
    "ToolCall": "._dispatch",
    "dispatch": "._dispatch",
    "McpToolError": ".mcp",
    "UnannotatedMcpToolsWarning": ".mcp",
    "from_mcp_session": ".mcp",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'durably.tools' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


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
