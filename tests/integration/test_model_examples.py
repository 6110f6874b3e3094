"""The agent example on the real openai and anthropic clients runs its whole story
offline: parked for an approval, approved with the CLI, SIGKILLed after the refund
reached the payments service, resumed by the same command with no recorded model call
asked again and one refund."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "openai_agent.py"


@pytest.mark.parametrize("flags", [[], ["--anthropic"]], ids=["openai", "anthropic"])
def test_the_agent_example_survives_its_sigkill(tmp_path: Path, flags: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), *flags],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "killed pid" in out and "(exit -9)" in out
    assert "model requests: 3 in all, 1 after the kill" in out
    assert "refunds at the payments service: 1" in out
    assert "sent 2 times with the same key" in out
    assert "answer: Refunded $42.50 for order A-17" in out
