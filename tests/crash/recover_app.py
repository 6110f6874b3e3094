"""An engine for the ``durably recover`` crash test (``recover_app:engine``).

The journal comes from ``DURABLY_URL``; ``RECOVER_WORLD`` is a SQLite file standing in for
the outside world (see :mod:`recover_flows`). With ``RECOVER_KILL=POS:WINDOW`` the process
SIGKILLs itself when the step at POS reaches WINDOW; ``RECOVER_LEASE_S`` sets the lease.
``python recover_app.py RUN_ID`` runs the workflow.
"""

from __future__ import annotations

import os
import signal
import sys

from recover_flows import register

import durably

KILL = os.environ.get("RECOVER_KILL")


def _hook(run_id: str, position: str, name: str, window: str) -> None:
    if KILL and (position, window) == tuple(KILL.split(":")):
        os.kill(os.getpid(), signal.SIGKILL)


engine = durably.Engine(
    fault_hook=_hook if KILL else None, lease_s=float(os.environ.get("RECOVER_LEASE_S", "30"))
)
pay = register(engine)


if __name__ == "__main__":
    print(engine.run(pay, 5, run_id=sys.argv[1]))
