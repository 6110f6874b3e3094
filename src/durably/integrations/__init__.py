"""Model clients as recorded steps: ``durably.integrations.openai.wrap`` and
``durably.integrations.anthropic.wrap``; Pydantic AI agents as durable runs:
``durably.integrations.pydantic_ai.DurableAgent`` (each imports its library only when
imported itself). ``refuse`` is how an adapter blocks a run it cannot record. See
docs/integrations.md."""

from __future__ import annotations

from ._common import IntegrationWarning, WrappedClient, WrapRefused, refuse
from ._streams import StreamCut

__all__ = ["IntegrationWarning", "StreamCut", "WrapRefused", "WrappedClient", "refuse"]
