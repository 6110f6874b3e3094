"""Model clients as recorded steps: ``durably.integrations.openai.wrap`` and
``durably.integrations.anthropic.wrap`` (each imports its client library only when
imported itself). See docs/integrations.md."""

from __future__ import annotations

from ._common import IntegrationWarning, WrappedClient, WrapRefused, refuse

__all__ = ["IntegrationWarning", "WrapRefused", "WrappedClient", "refuse"]
