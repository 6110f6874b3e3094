"""durably under the OpenAI Agents SDK (``pip install 'durably[openai-agents]'``).

``await DurableRunner.run(agent, input)`` inside an async durably workflow records every
model turn and tool call, parks ``needs_approval`` tools as durably approvals, and
replays all of it after a crash; outside a workflow it is ``agents.Runner.run``.
:func:`function_tool` turns a ``@durably.tool`` into an SDK tool that keeps its kind's
rules. See docs/integrations.md ("The OpenAI Agents SDK").
"""

from __future__ import annotations

try:
    import agents as _agents  # noqa: F401
except ImportError as exc:  # pragma: no cover - the extra is installed in dev and CI
    raise ImportError(
        "durably.integrations.openai_agents needs the OpenAI Agents SDK:"
        " pip install 'durably[openai-agents]'"
    ) from exc

from ._runner import DurableRunner
from ._tools import function_tool

__all__ = ["DurableRunner", "function_tool"]
