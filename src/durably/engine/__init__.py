"""The engine: a registry of workflows and the loop that drives one run.

``durably.engine.Engine`` is the public facade (facade.py); every name users and tools
import from ``durably.engine`` is re-exported here.
"""

from __future__ import annotations

from ..replay.kernel import FaultHook
from .facade import (
    DEFAULT_URL,
    EVENTS_PAGE_MAX,
    LEASE_S_DEFAULT,
    LEASE_WAIT_MAX_S,
    MAX_STARTS_DEFAULT,
    Engine,
    Handle,
    QueueLimits,
    Workflow,
    newest,
    park_reason,
    version_key,
)

__all__ = [
    "DEFAULT_URL",
    "EVENTS_PAGE_MAX",
    "LEASE_S_DEFAULT",
    "LEASE_WAIT_MAX_S",
    "MAX_STARTS_DEFAULT",
    "Engine",
    "FaultHook",
    "Handle",
    "QueueLimits",
    "Workflow",
    "newest",
    "park_reason",
    "version_key",
]
