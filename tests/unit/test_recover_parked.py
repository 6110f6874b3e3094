"""``engine.recover()`` / ``durably recover`` and runs a dead process was waiting for: a run
parked on a wake-up that is due (or due within ``RECOVER_WAIT_S``: a short timer) is
resumed, not left parked with nothing to drive it; one left parked on a later wake-up is
reported with its reason, not as "stopped"."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import durably
from durably.cli import main as cli
from durably.limits import RECOVER_WAIT_S

APP = """
import durably

engine = durably.Engine()


@engine.workflow(name="nap")
def nap(ctx):
    ctx.sleep(0.2)
    ctx.sleep(3600)
    return "up"
"""


def test_recover_resumes_parked_runs_whose_wake_up_is_due_or_near(tmp_path: Path) -> None:
    clock = durably.FakeClock()
    # park_wait_s=0 leaves each run parked with no owner: what a process that died while
    # engine.run waited for the timer leaves behind.
    with durably.Engine(f"sqlite:///{tmp_path / 'j.db'}", clock=clock, park_wait_s=0) as e:

        @e.workflow(name="sleeper")
        def sleeper(ctx: durably.Context, first: float, then: float) -> str:
            ctx.sleep(first)
            if then:
                ctx.sleep(then)
            return "done"

        cases = {"due": (1, 0), "soon": (RECOVER_WAIT_S / 2, 0), "later": (3600, 0)}
        cases["again"] = (1, 3600)  # resumed, then parks on a long timer
        for run_id, args in cases.items():
            with pytest.raises(durably.RunParked):
                e.run(sleeper, *args, run_id=run_id)
        clock.advance(2)
        results = e.recover()
        assert results["due"] == "done" and results["soon"] == "done"
        assert isinstance(results["again"], durably.RunParked)
        assert "later" not in results and e.get_run("later").status == "parked"
        assert e.get_run("again").status == "parked"


def test_durably_recover_says_when_a_run_it_left_parked_wakes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "app.py").write_text(APP)
    url = f"sqlite:///{tmp_path / 'j.db'}"
    monkeypatch.setenv("DURABLY_URL", url)
    with durably.Engine(url, park_wait_s=0) as e:
        nap = e.workflow(name="nap")(lambda ctx: ctx.sleep(0.2) or ctx.sleep(3600))
        with pytest.raises(durably.RunParked):
            e.run(nap, run_id="n")
    out = CliRunner().invoke(cli, ["recover", f"{tmp_path / 'app.py'}:engine", "--db", url])
    assert out.exit_code == 0, out.output
    assert out.output.startswith("n: parked again: timer until "), out.output
    assert "a worker (`durably worker MODULE:ENGINE`) resumes it then" in out.output
    assert "stopped" not in out.output and "engine.run" not in out.output
    none = CliRunner().invoke(cli, ["recover", f"{tmp_path / 'app.py'}:engine", "--db", url])
    assert "nothing to recover" in none.output and "no parked run's wake-up is due" in none.output
