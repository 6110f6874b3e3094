"""The old home of ``durably replay --check``'s machinery, kept so imports of it keep
working: it lives in :mod:`durably.inspect.replaycheck`."""

from __future__ import annotations

from .inspect.replaycheck import (
    DIVERGES,
    UNSERVED,
    Finding,
    Report,
    check_run,
    check_runs,
    runs_to_check,
)

__all__ = ["DIVERGES", "UNSERVED", "Finding", "Report", "check_run", "check_runs", "runs_to_check"]
