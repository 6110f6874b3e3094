"""Deterministic simulation testing of durably's protocol (``python -m durably.chaos.dst``).

The whole system in one OS process: several simulated worker processes and outside
callers, each a greenlet with its own :class:`durably.Engine` and its own connection to
one real SQLite journal (the real store code, its named queries and the transaction
protocol of :mod:`durably.store.tx`), driving real workflows (:mod:`.workloads`) through
the real kernel, runtime and engine. A seeded scheduler (:mod:`.sched`) chooses, one
store transaction or step boundary at a time, which process goes next and what befalls it
there: a transaction refused (busy, a full disk, a failure before commit), committed with
its reply lost, the process's death before or right after a commit, a stall past its
lease. Time is a fake clock; no real thread or sleep runs. After every scheduled action
the world (:mod:`.world`) checks the invariants that action could break; at the end
every run must have the result an uncrashed run gives, or be resumable with a reason
``durably.explain`` states. One seed is one interleaving: a failure prints its seed and
a shrunk trace, and replays exactly. docs/simulation.md says what it covers and what it
does not (PostgreSQL's row-lock concurrency: the fleet and torture suites).
"""

from __future__ import annotations

from .sim import Config, Report, shrink, simulate

__all__ = ["Config", "Report", "shrink", "simulate"]
