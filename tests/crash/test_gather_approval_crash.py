"""A real SIGKILL while an approval request in one ``ctx.gather`` branch waits for the
park and the sibling branch is still working (its first step written, its second
running).

The request's ``waiting`` record must not have reached the journal without its
``approvals`` row: restarted, the run asks for the approval (its row written with the
park) instead of finding a request with no row and blocking; approved, it finishes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import durably
from durably.approvals import approval_digest

from .scripts import kill_at_marker

AGENT = Path(__file__).with_name("gather_approval_agent.py")
RUN_ID = "ask-1"


def agent(tmp: Path, hang: bool) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            str(AGENT),
            f"sqlite:///{tmp / 'journal.db'}",
            RUN_ID,
            str(tmp / "hanging"),
            "1" if hang else "0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_sigkill_beside_a_request_in_a_gather_branch_does_not_block_the_run(
    tmp_path: Path,
) -> None:
    kill_at_marker(agent(tmp_path, hang=True), tmp_path / "hanging")
    # No wait for the dead process's lease: its pid is gone, the next claim takes it over.
    second = agent(tmp_path, hang=False)
    out, err = second.communicate(timeout=60)
    assert second.returncode == 0, err
    assert json.loads(out) == {"status": "parked"}  # asking, not blocked
    with durably.Engine(f"sqlite:///{tmp_path / 'journal.db'}") as engine:
        [req] = engine.pending_approvals(RUN_ID)
        assert (req.request_id, req.action) == ("0.0.0", "ship")
        engine.approve(RUN_ID, "0.0.0", digest=approval_digest("ship", {"n": 1}))
    third = agent(tmp_path, hang=False)
    out, err = third.communicate(timeout=60)
    assert third.returncode == 0, err
    assert json.loads(out) == {"result": ["approved", "two"]}
