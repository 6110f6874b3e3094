"""``DurablyMiddleware`` under a real SIGKILL, with a ``BaseChatModel`` of the test's
own counting its calls and a tool writing to a separate SQLite world with its key
(``agent_app.py``): killed (a) after the first model response is recorded and (b)
inside the tool after its write, the resumed run asks the model nothing it was already
asked, the world holds each write once under an unchanged key, and the answer is an
uncrashed run's. Two tool calls LangChain runs on threads at once, killed between
them, run once each at the positions of an uncrashed run. The model gives its tool
calls fresh random ids on every call, so a digest over them would fail the resume.
The harness and its assertions are shared with every adapter: ``crash_harness.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .. import crash_harness
from .agent_app import build

APP = "tests.integration.langchain.agent_app"


@pytest.fixture(scope="module")
def control(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Uncrashed runs of both scenarios, in this process."""
    return crash_harness.control_runs(tmp_path_factory, build)


@pytest.mark.parametrize("kill_at", ["after-model", "after-write"])
def test_a_killed_run_resumes_without_asking_the_model_again(
    tmp_path: Path, kill_at: str, control: dict[str, Any]
) -> None:
    crash_harness.check_a_killed_run_resumes(APP, tmp_path, kill_at, control)


def test_parallel_tool_calls_killed_between_them_run_once_at_stable_positions(
    tmp_path: Path, control: dict[str, Any]
) -> None:
    crash_harness.check_parallel_calls_killed_between_them(APP, tmp_path, control)
