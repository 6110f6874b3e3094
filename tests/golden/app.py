"""The golden workflows on an engine taking its URL from DURABLY_URL, for
``durably replay --check tests.golden.app:engine --db URL`` (test_golden.py)."""

from __future__ import annotations

import durably
from tests.golden.workflows import register

engine = durably.Engine()
register(engine)
