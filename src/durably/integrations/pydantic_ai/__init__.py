"""Pydantic AI agents as durable runs (``pip install 'durably[pydantic-ai]'``).

``DurableAgent(agent, name="support")`` keeps the agent's interface. Inside an ``async
def`` durably workflow, ``await durable.run(prompt, deps=...)`` (and ``run_stream``,
``iter``) records each model request and each tool call as a step, parks a
``requires_approval=True`` tool as a durably approval and puts the model's usage in the
run's spend; everywhere else the agent runs as it would without durably. Built on
Pydantic AI's public wrapper and capability API only. See docs/integrations.md.
"""

from __future__ import annotations

try:
    import pydantic_ai as _pydantic_ai  # noqa: F401
except ImportError as exc:  # pragma: no cover - the extra is not installed
    raise ImportError(
        "durably.integrations.pydantic_ai needs pydantic-ai-slim:"
        " pip install 'durably[pydantic-ai]'"
    ) from exc

from ._agent import DurableAgent

__all__ = ["DurableAgent"]
