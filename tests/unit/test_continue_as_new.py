"""``ctx.continue_as_new``: one run id, many generations. Each generation's positions
start at 0, its keys, event positions and dedupe names carry ``g<N>.``, the old
generations stay readable and are never replayed, signals not consumed carry over, and
``engine.run`` / a worker drive every generation to the final result."""

from __future__ import annotations

import pytest

import durably
from durably.worker import Worker


def _key(i: int, *, idempotency_key: str) -> str:
    return idempotency_key


def test_keys_positions_and_old_generations(journal_url: str) -> None:
    engine = durably.Engine(journal_url)

    @engine.workflow(name="mailbox")
    def mailbox(ctx: durably.Context, gen: int, seen: list[str]) -> list[str]:
        ctx.emit("gen", gen)  # the same dedupe position in every generation: kept apart
        seen = [*seen, ctx.step("k", _key, gen)]
        if gen < 2:
            return ctx.continue_as_new(gen + 1, seen)
        return seen

    keys = engine.run(mailbox, 0, [], run_id="mb")
    inc = engine.store.get_run("mb").incarnation  # type: ignore[union-attr]
    assert keys == [f"mb:{inc}:0", f"mb:{inc}:g1.0", f"mb:{inc}:g2.0"]
    run = engine.store.get_run("mb")
    assert run is not None and run.status == "completed" and run.generation == 2
    # Old generations stay readable, positions from 0 in each.
    for n in range(3):
        assert [r.position for r in engine.history("mb", generation=n)] == ["0"]
    evs = engine.events("mb").events
    assert [e.data["data"] for e in evs if e.kind == "user"] == [0, 1, 2]
    assert [e.position for e in evs if e.kind == "user"] == ["0", "g1.0", "g2.0"]
    assert [e.data["generation"] for e in evs if e.kind == "run.continued"] == [1, 2]
    # The same call again finds the run by generation 0's input, and its result.
    assert engine.run(mailbox, 0, [], run_id="mb") == keys
    with pytest.raises(durably.RunConflict):
        engine.run(mailbox, 2, keys[:2], run_id="mb")  # the last generation's input
    engine.close()


def test_async_workflow_and_await_form(journal_url: str) -> None:
    engine = durably.Engine(journal_url)

    @engine.workflow(name="acount")
    async def acount(ctx: durably.AsyncContext, n: int) -> int:
        got = await ctx.step("k", _key, n)
        assert got.endswith(f":{n}" if n == 0 else f":g{n}.0")
        if n < 3:
            await ctx.continue_as_new(n + 1)
        return n

    assert engine.run(acount, 0, run_id="a") == 3
    engine.close()


def test_unconsumed_signals_carry_over_and_consumers_carry_the_generation(
    journal_url: str,
) -> None:
    engine = durably.Engine(journal_url)

    @engine.workflow(name="inbox")
    def inbox(ctx: durably.Context, got: list[object]) -> list[object]:
        got = [*got, ctx.wait_for_signal("msg")]
        if len(got) < 3:
            return ctx.continue_as_new(got)
        return got

    handle = engine.start(inbox, [], run_id="inbox")
    for i in range(4):
        engine.signal("inbox", "msg", i)
    # Each generation's wait at position 0 takes the next signal (its consumer is
    # g<N>.0, never generation 0's "0", which would hand it signal 0 again).
    assert engine.resume(handle.run_id) == [0, 1, 2]
    run = engine.store.get_run("inbox")
    assert run is not None and run.generation == 2
    engine.close()


def test_a_worker_drives_every_generation(journal_url: str) -> None:
    engine = durably.Engine(journal_url)

    @engine.workflow(name="countdown")
    def countdown(ctx: durably.Context, n: int) -> str:
        ctx.step("k", _key, n)
        if n > 0:
            return ctx.continue_as_new(n - 1)
        return "liftoff"

    handle = engine.start(countdown, 3, run_id="cd")
    stats = Worker(engine, poll_interval_s=0.01).run(max_runs=1)  # one claim: all of it
    assert (stats.claimed, stats.completed) == (1, 1)
    assert handle.result(timeout_s=5) == "liftoff"
    assert engine.store.get_run("cd").generation == 3  # type: ignore[union-attr]
    engine.close()


def test_misuse_blocks_the_run(tmp_path: object) -> None:
    engine = durably.Engine(f"sqlite:///{tmp_path}/j.db")

    @engine.workflow(name="wrongargs")
    def wrongargs(ctx: durably.Context, n: int) -> int:
        return ctx.continue_as_new(n, "extra", "args")

    with pytest.raises(durably.ConfigError, match="cannot take these arguments"):
        engine.run(wrongargs, 1, run_id="w")
    assert engine.store.get_run("w").status == "blocked"  # type: ignore[union-attr]
    assert engine.store.get_run("w").generation == 0  # type: ignore[union-attr]

    @engine.workflow(name="unstorable")
    def unstorable(ctx: durably.Context, n: int) -> int:
        return ctx.continue_as_new(object())

    with pytest.raises(durably.SerializationError, match="must be storable JSON"):
        engine.run(unstorable, 1, run_id="u")

    @engine.workflow(name="inbranch")
    async def inbranch(ctx: durably.AsyncContext) -> int:
        async def branch() -> int:
            ctx.continue_as_new()

        await ctx.gather(branch())
        return 0

    with pytest.raises(durably.ConfigError, match="top level"):
        engine.run(inbranch, run_id="b")

    @engine.workflow(name="caught")
    def caught(ctx: durably.Context, n: int) -> int:
        if n == 0:
            try:
                ctx.continue_as_new(1)
            except BaseException:
                pass  # a bare except: the hand-over is latched all the same
            return ctx.step("after", _key, 0)  # raises the latched hand-over again
        return n

    assert engine.run(caught, 0, run_id="c") == 1
    assert engine.history("c", generation=0) == []  # "after" never ran in generation 0
    engine.close()


def test_a_cancel_outranks_the_hand_over(journal_url: str) -> None:
    engine = durably.Engine(journal_url)

    @engine.workflow(name="cancelled")
    def cancelled(ctx: durably.Context, n: int) -> int:
        ctx.step("k", _key, n)
        if n == 0:
            engine.cancel("cx", reason="stop")
            ctx.step("k", _key, 99)  # the append sees the flag
        return ctx.continue_as_new(n + 1)

    with pytest.raises(durably.Cancelled):
        engine.run(cancelled, 0, run_id="cx")
    run = engine.store.get_run("cx")
    assert run is not None and run.status == "cancelled" and run.generation == 0
    engine.close()
