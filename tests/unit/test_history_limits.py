"""History limits: ``Engine(history_warn=, history_max=)`` count a run's current
generation (records and stored text), warn once per generation past the warning, and
refuse the next recording call at the limit (``HistoryTooLarge``, not latched: caught,
the workflow continues as new; uncaught, the run is ``blocked`` with that advice). Also
the per-run bounds on emits, unconsumed signals and pending approvals."""

from __future__ import annotations

import logging

import pytest

import durably
import durably.store.signals
from durably.limits import EMITS_PER_POSITION_MAX, SIGNALS_PENDING_MAX


def _work(i: int) -> int:
    return i * i


def test_crossing_the_warning_gives_one_event_per_generation_across_claims(
    journal_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    engine = durably.Engine(journal_url, history_warn=(3, 10**9), history_max=None, park_wait_s=0)

    @engine.workflow()
    def grow(ctx: durably.Context, n: int) -> int:
        total = sum(ctx.step("w", _work, i) for i in range(n))
        ctx.wait_for_signal("go")  # parks: the resume is a second claim past the warning
        return total + sum(ctx.step("v", _work, i) for i in range(n))

    with caplog.at_level(logging.WARNING, logger="durably"):
        with pytest.raises(durably.RunParked):
            engine.run(grow, 4, run_id="warned")
        engine.signal("warned", "go", None)
        assert engine.run(grow, 4, run_id="warned") == 2 * sum(i * i for i in range(4))
    warnings = [e for e in engine.events("warned").events if e.kind == "run.history_warning"]
    assert len(warnings) == 1  # the second claim's is the same event, stored once
    assert warnings[0].data["generation"] == 0 and warnings[0].data["records"] == 3
    lines = [r.getMessage() for r in caplog.records if "history in generation" in r.getMessage()]
    assert lines and "run warned has 3 records" in lines[0]
    assert len(lines) == 2  # a log line per claim that finds the run past the warning
    engine.close()


def test_the_limit_uncaught_blocks_the_run_with_the_continue_as_new_advice(
    journal_url: str,
) -> None:
    engine = durably.Engine(journal_url, history_warn=None, history_max=(4, 10**9))
    ran: list[int] = []

    def work(i: int) -> int:
        ran.append(i)
        return i

    @engine.workflow()
    def grow(ctx: durably.Context, n: int) -> int:
        return sum(ctx.step("w", work, i) for i in range(n))

    with pytest.raises(durably.HistoryTooLarge) as caught:
        engine.run(grow, 10, run_id="capped")
    assert ran == [0, 1, 2, 3]  # refused before the fifth step ran
    assert caught.value.records == 4 and caught.value.limit == (4, 10**9)
    run = engine.store.get_run("capped")
    assert run is not None and run.status == "blocked"
    assert run.park_reason is not None and "ctx.continue_as_new(state)" in run.park_reason
    assert len(engine.history("capped")) == 4  # nothing written at the limit
    blocked = [e for e in engine.events("capped").events if e.kind == "run.blocked"]
    assert blocked[-1].data["error_type"] == "HistoryTooLarge"
    engine.close()


def test_not_latched_a_caught_limit_continues_as_new_to_the_uncapped_result(
    journal_url: str,
) -> None:
    capped = durably.Engine(journal_url, history_warn=(3, 10**9), history_max=(5, 10**9))

    @capped.workflow(name="loop")
    def loop(ctx: durably.Context, i: int, total: int, acc: int) -> int:
        while i < total:
            try:
                acc += ctx.step("w", _work, i)
            except durably.HistoryTooLarge:
                return ctx.continue_as_new(i, total, acc)
            i += 1
        return acc

    result = capped.run(loop, 0, 17, 0, run_id="looped")
    assert result == sum(i * i for i in range(17))  # what an uncapped run returns
    run = capped.store.get_run("looped")
    assert run is not None and run.status == "completed" and run.generation == 3
    gens = capped.store.list_generations("looped")
    assert [(g.generation, g.status, g.records) for g in gens] == [
        (0, "continued", 5),
        (1, "continued", 5),
        (2, "continued", 5),
    ]
    warnings = [e for e in capped.events("looped").events if e.kind == "run.history_warning"]
    assert [e.data["generation"] for e in warnings] == [0, 1, 2]  # one per generation
    capped.close()


def test_bytes_count_too(journal_url: str) -> None:
    engine = durably.Engine(journal_url, history_warn=None, history_max=(10**6, 2_000))

    @engine.workflow()
    def big(ctx: durably.Context) -> int:
        for _ in range(100):
            ctx.step("w", lambda: "x" * 500)
        return 0

    with pytest.raises(durably.HistoryTooLarge) as caught:
        engine.run(big, run_id="bytes")
    assert caught.value.bytes >= 2_000 and caught.value.records < 10
    engine.close()


@pytest.mark.parametrize(
    ("option", "value"),
    [("history_warn", (0, 5)), ("history_max", "50000"), ("history_max", (1, 2, 3))],
)
def test_bad_bounds_are_refused(tmp_path: object, option: str, value: object) -> None:
    with pytest.raises(durably.ConfigError, match=option):
        durably.Engine(f"sqlite:///{tmp_path}/j.db", **{option: value})


def test_a_warning_past_the_limit_is_refused(tmp_path: object) -> None:
    with pytest.raises(durably.ConfigError, match="before the limit"):
        durably.Engine(f"sqlite:///{tmp_path}/j.db", history_warn=(10, 10), history_max=(5, 5))


def test_emits_per_position_are_bounded(tmp_path: object) -> None:
    engine = durably.Engine(f"sqlite:///{tmp_path}/j.db")

    @engine.workflow()
    def chatty(ctx: durably.Context) -> str:
        for i in range(EMITS_PER_POSITION_MAX):
            ctx.emit("tick", i)
        try:
            ctx.emit("tick", "one too many")
        except durably.ConfigError as exc:
            return str(exc)
        return "accepted"

    said = engine.run(chatty, run_id="chatty")
    assert "1,000 events at position 0" in said and "record a step between emits" in said
    engine.close()


def test_unconsumed_signals_are_bounded(journal_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The bound itself is 10,000; five keep the test fast (the check is the same code).
    monkeypatch.setattr(durably.store.signals, "SIGNALS_PENDING_MAX", 5)
    engine = durably.Engine(journal_url)

    @engine.workflow()
    def waits(ctx: durably.Context) -> object:
        return ctx.wait_for_signal("go")

    handle = engine.start(waits, run_id="mailbox")
    for i in range(5):
        engine.signal(handle.run_id, "go", i)
    with pytest.raises(durably.SignalQueueFull, match="5 signals it has not consumed"):
        engine.signal(handle.run_id, "go", "one too many")
    assert SIGNALS_PENDING_MAX == 10_000
    engine.close()


def test_a_saga_still_compensates_at_the_limit(tmp_path: object) -> None:
    engine = durably.Engine(f"sqlite:///{tmp_path}/j.db", history_warn=None, history_max=(3, 10**9))
    undone: list[str] = []

    @engine.workflow()
    def booking(ctx: durably.Context) -> str:
        with ctx.saga() as saga:
            saga.step("hold", lambda: "held", lambda: undone.append("held"))
            ctx.step("a", _work, 1)
            ctx.step("b", _work, 2)  # the third record: at the limit
            ctx.step("c", _work, 3)  # refused: HistoryTooLarge leaves the saga
        return "booked"

    with pytest.raises(durably.HistoryTooLarge):
        engine.run(booking, run_id="saga")
    assert undone == ["held"]  # the compensation ran past the limit: nothing stranded
    assert engine.store.get_run("saga").status == "blocked"  # type: ignore[union-attr]
    engine.close()
