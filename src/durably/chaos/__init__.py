"""Crash testing and crash experiments: ``durably chaos``, ``simulate`` and ``bench``.

* :mod:`durably.chaos.matrix`: the crash matrix. A scripted incident agent is killed with
  a real SIGKILL at every step boundary (10 steps x 3 windows) under four persistence
  policies, restarted, and the outside world is audited for duplicate writes and the
  token meter for repeated model spend.
* :mod:`durably.chaos.workflow_chaos`: the same kill-and-resume sweep for any registered
  workflow (``durably chaos --workflow module:function``).
* :mod:`durably.chaos.simulate`: the Monte-Carlo experiment (20,000 six-step tasks with
  injected crashes) run on the real replay engine.
* :mod:`durably.chaos.commitbench`: the latency of one durable journal commit.

Nothing here is imported by ``import durably``; the CLI loads it lazily.
"""

from __future__ import annotations

WINDOWS: tuple[str, str, str] = ("before", "effect", "recorded")
"""The three windows of a step, in the order the engine's fault hook sees them."""

__all__ = ["WINDOWS"]
