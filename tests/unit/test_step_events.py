"""The step events of the stream name their claim: a step executed again by a later
claim (after a crash) logs its own ``step.started``, so a reader of the stream sees both
executions, not one; on both stores."""

from __future__ import annotations

import pytest

import durably


class Crash(BaseException):
    """Stands in for a process death inside one process (real deaths: tests/crash)."""


def test_a_later_claims_re_execution_of_a_step_logs_its_own_step_started(
    journal_url: str,
) -> None:
    crashes = {"left": 1}

    def crash_in_the_effect(run_id: str, pos: str, name: str, window: str) -> None:
        if (pos, window) == ("0", "effect") and crashes["left"]:
            crashes["left"] -= 1
            raise Crash("died after the effect, before its record")

    calls: list[str] = []

    @durably.step(effect=True)
    def send(*, idempotency_key: str) -> str:
        calls.append(idempotency_key)
        return "sent"

    with durably.Engine(journal_url, fault_hook=crash_in_the_effect) as e:

        @e.workflow(name="w")
        def w(ctx: durably.Context) -> str:
            out: str = ctx.step("send", send)
            return out

        with pytest.raises(Crash):
            e.run(w, run_id="r")
        assert e.run(w, run_id="r") == "sent"
        assert len(calls) == 2  # executed again, with the same key
        started = [ev for ev in e.events("r").events if ev.kind == "step.started"]
        assert [(ev.position, ev.data["attempt"]) for ev in started] == [("0", 1), ("0", 2)]
        assert started[0].data["key"] == started[1].data["key"] == calls[0]
