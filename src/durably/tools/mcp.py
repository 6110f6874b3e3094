"""``durably.tools.from_mcp_session``: an MCP client session's tools as durably tools.

Each tool's kind comes from its MCP annotations (:func:`durably.tool.from_mcp`, MCP's
conservative defaults for a missing hint) unless ``kinds=`` names it. A call is an async
step whose idempotency key travels in the request's ``_meta`` (``{"idempotency_key":
key}``), so a server that honours it deduplicates a call repeated after a crash.
Works on anything with the session's two coroutines (``list_tools()``, ``call_tool(name,
arguments, meta=...)``); the ``mcp`` package itself is not imported here.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from ..errors import ConfigError, DurablyError
from ._tool import KINDS, Tool, from_mcp, make_tool


class McpToolError(DurablyError):
    """The MCP server answered a tool call with ``isError``: the tool failed (the step
    fails with this error; ``dispatch`` hands its text to the model)."""


class UnannotatedMcpToolsWarning(UserWarning):
    """Some of a session's tools carry no annotations and were taken as destructive."""


def _get(obj: Any, *names: str) -> Any:
    for name in names:
        value = obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)
        if value is not None:
            return value
    return None


def _result_value(result: Any) -> Any:
    """What a tool call's step records: the text of its text blocks, else its
    structured content, else the whole result as JSON data."""
    if _get(result, "is_error", "isError"):
        texts = [_get(c, "text") or "" for c in _get(result, "content") or []]
        raise McpToolError(" ".join(t for t in texts if t) or "the MCP tool reported an error")
    content = _get(result, "content") or []
    if content and all(_get(c, "type") == "text" for c in content):
        return "\n".join(str(_get(c, "text")) for c in content)
    structured = _get(result, "structured_content", "structuredContent")
    if structured is not None:
        return structured
    dump = getattr(result, "model_dump", None)
    return dump(mode="json", by_alias=True) if callable(dump) else result


def _mcp_tool(session: Any, spec: Any, kind: str) -> Tool:
    name = str(_get(spec, "name"))

    async def call(idempotency_key: str, **arguments: Any) -> Any:
        result = await session.call_tool(name, arguments, meta={"idempotency_key": idempotency_key})
        return _result_value(result)

    call.__name__ = call.__qualname__ = name
    schema = _get(spec, "input_schema", "inputSchema") or {"type": "object", "properties": {}}
    if not isinstance(schema, Mapping):
        schema = getattr(schema, "model_dump", dict)()
    return make_tool(
        call,
        kind=kind,
        approval=None,
        name=name,
        reconcile=None,
        description=_get(spec, "description") or "",
        input_schema=dict(schema),
    )


async def from_mcp_session(session: Any, kinds: Mapping[str, str] | None = None) -> list[Tool]:
    """The tools of an MCP client ``session`` (``mcp.ClientSession``, or the
    ``mcp.Client``), each a durably :class:`Tool` (async: use it in an async workflow)
    for ``durably.tools.dispatch`` or direct calls; their schemas are the server's.

    ``kinds={"search": "read", ...}`` overrides the kind the annotations give (names the
    server does not list are refused). A tool without annotations is destructive (MCP's
    defaults), so each call asks a person first; one warning
    (``UnannotatedMcpToolsWarning``) names those tools and how to override.
    """
    kinds = dict(kinds or {})
    for n, k in kinds.items():
        if k not in KINDS:
            raise ConfigError(f"kinds[{n!r}]={k!r}: choose one of {', '.join(map(repr, KINDS))}")
    listed = await session.list_tools()
    specs = list(_get(listed, "tools") or [])
    names = [str(_get(s, "name")) for s in specs]
    unknown = sorted(set(kinds) - set(names))
    if unknown:
        raise ConfigError(
            f"kinds= names tools the server does not list: {', '.join(unknown)} (it lists:"
            f" {', '.join(sorted(names)) or 'none'})"
        )
    tools: list[Tool] = []
    bare: list[str] = []
    for spec, name in zip(specs, names, strict=True):
        annotations = _get(spec, "annotations")
        if name in kinds:
            kind = kinds[name]
        else:
            kind = from_mcp(annotations)
            if annotations is None:
                bare.append(name)
        tools.append(_mcp_tool(session, spec, kind))
    if bare:
        example = ", ".join(f'"{n}": "read"' for n in bare[:2])
        warnings.warn(
            f"MCP tools without annotations taken as destructive (each call asks a person"
            f" first): {', '.join(bare)}; if you checked them, override with"
            f" from_mcp_session(session, kinds={{{example}}})",
            UnannotatedMcpToolsWarning,
            stacklevel=2,
        )
    return tools
