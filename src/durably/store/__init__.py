"""Journal storage: the :class:`Store` protocol and its backends."""

from __future__ import annotations

from .base import NewRun, Owner, Store
from .open import open_store

__all__ = ["NewRun", "Owner", "Store", "open_store"]
