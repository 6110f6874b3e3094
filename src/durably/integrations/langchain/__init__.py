"""LangChain agents as durable runs (``pip install 'durably[langchain]'``).

``create_agent(model, tools, middleware=[DurablyMiddleware()])`` run inside a durably
workflow (sync or async) records each model call and each tool call as a step: a
resumed run never asks the model again for a recorded turn nor re-runs a recorded
tool, parallel tool calls take positions in the order the model listed them, a tool
reads its idempotency key from ``durably.current_step()``, usage goes into the run's
spend and budget, and ``wait_for_approval(...)`` inside a tool parks the run until
``durably approve``. Outside a workflow the agent runs as it would without durably.
Built on LangChain's public middleware API only. See docs/integrations.md.
"""

from __future__ import annotations

try:
    import langchain.agents as _agents  # noqa: F401
except ImportError as exc:  # pragma: no cover - the extra is not installed
    raise ImportError(
        "durably.integrations.langchain needs langchain: pip install 'durably[langchain]'"
    ) from exc

from ._approval import wait_for_approval
from ._middleware import DurablyMiddleware

__all__ = ["DurablyMiddleware", "wait_for_approval"]
