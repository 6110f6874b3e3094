"""``durably.explain`` meets bad input with a ``ConfigError`` naming what to pass, as
every entry point does: once, a URL passed for the engine raised ``AttributeError: 'str'
object has no attribute 'clock'`` and a ``now`` that is no time a ``TypeError`` from deep
inside the sentence builder."""

from __future__ import annotations

from pathlib import Path

import pytest

import durably


@pytest.mark.parametrize("engine", ["sqlite:///journal.db", None, object()])
def test_explain_refuses_what_is_not_an_engine(engine: object) -> None:
    with pytest.raises(durably.ConfigError, match=r"durably\.explain takes a durably\.Engine"):
        durably.explain(engine, "r1")  # type: ignore[arg-type]


@pytest.mark.parametrize("now", ["now", float("nan"), True])
def test_explain_refuses_a_now_that_is_no_time(tmp_path: Path, now: object) -> None:
    with durably.Engine(f"sqlite:///{tmp_path / 'j.db'}") as engine:

        @engine.workflow(name="wf")
        def wf(ctx: durably.Context) -> int:
            return 1

        engine.run("wf", run_id="r1")
        with pytest.raises(durably.ConfigError, match="now must be None"):
            durably.explain(engine, "r1", now=now)  # type: ignore[arg-type]
        assert durably.explain(engine, "r1", now=0).status == "completed"
