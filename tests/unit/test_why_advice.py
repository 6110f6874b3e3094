"""What ``runs why`` tells a person to do is what works: a run blocked by a changed prompt
resumes by running it again (``durably retry`` only hands it to a worker, which claims no
blocked run); a parked run is said to hold no lease or worker slot (an ``engine.run`` may
be waiting for it in-process, so "holds no process" was not true)."""

from __future__ import annotations

from pathlib import Path

import pytest

import durably


def test_a_prompt_change_blocks_and_running_it_again_as_told_resumes_it(tmp_path: Path) -> None:
    prompt = ["You are terse."]
    clock = durably.FakeClock()
    with durably.Engine(f"sqlite:///{tmp_path / 'j.db'}", park_wait_s=0, clock=clock) as engine:

        @engine.workflow(name="ask")
        def ask(ctx: durably.Context) -> str:
            answer = ctx.step("model", lambda p: f"ok: {p}", prompt[0])
            ctx.sleep(60)
            return answer

        with pytest.raises(durably.RunParked):
            engine.run(ask, run_id="r")
        clock.advance(61)
        prompt[0] = "You are verbose."  # a deploy that changed the prompt under the run
        with pytest.raises(durably.NonDeterminism):
            engine.resume("r")
        said = durably.explain(engine, "r").sentence
        assert "then run it again (`engine.resume('r')`, or `durably retry r`" in said
        assert "holds no process" not in said
        prompt[0] = "You are terse."  # the old code back: running it again is enough
        assert engine.resume("r") == "ok: You are terse."


def test_a_parked_run_is_not_said_to_hold_no_process(tmp_path: Path) -> None:
    with durably.Engine(f"sqlite:///{tmp_path / 'j.db'}", park_wait_s=0) as engine:

        @engine.workflow(name="nap")
        def nap(ctx: durably.Context) -> None:
            ctx.sleep(3600)

        with pytest.raises(durably.RunParked):
            engine.run(nap, run_id="n")
        said = durably.explain(engine, "n").sentence
    assert "holds no lease or worker slot: an engine.run/resume waiting for it" in said
    assert "holds no process" not in said
