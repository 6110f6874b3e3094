"""Model clients as recorded steps: ``durably.integrations.openai.wrap`` and
``durably.integrations.anthropic.wrap`` (each imports its client library only when
imported itself). See docs/integrations.md."""

from __future__ import annotations

from ._common import IntegrationWarning, WrappedClient, WrapRefused, refuse
from ._streams import StreamCut

__all__ = ["IntegrationWarning", "StreamCut", "WrapRefused", "WrappedClient", "refuse"]
