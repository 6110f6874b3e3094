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
    # Step events too: one claim drives all three generations under one token, and
    # their dedupe names differ by the generation (else generation 1's are dropped).
    done = [e for e in evs if e.kind == "step.completed"]
    assert [e.position for e in done] == ["0", "g1.0", "g2.0"]
    assert [e.data["key"] for e in done] == keys
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


def test_runs_show_list_and_why_know_generations(tmp_path: object) -> None:
    import json

    from click.testing import CliRunner

    from durably.cli import main as cli

    url = f"sqlite:///{tmp_path}/j.db"
    engine = durably.Engine(url)

    @engine.workflow(name="gens")
    def gens(ctx: durably.Context, n: int) -> int:
        ctx.step("k", _key, n)
        if n < 2:
            return ctx.continue_as_new(n + 1)
        return n

    engine.run(gens, 0, run_id="g")
    inc = engine.store.get_run("g").incarnation  # type: ignore[union-attr]
    engine.close()

    def cli_out(*args: str) -> str:
        res = CliRunner().invoke(cli, [*args, "--db", url])
        assert res.exit_code == 0, res.output
        return res.output

    shown = json.loads(cli_out("runs", "show", "g", "--json", "--generation", "1"))
    assert shown["generation"] == 1 and shown["run"]["generation"] == 2
    assert [s["key"] for s in shown["steps"]] == [f"g:{inc}:g1.0"]
    assert [(g["generation"], g["status"], g["input"]) for g in shown["generations"]] == [
        (0, "continued", {"args": [0], "kwargs": {}}),
        (1, "continued", {"args": [1], "kwargs": {}}),
    ]
    text = cli_out("runs", "show", "g")
    assert f"g:{inc}:g2.0" in text and "generation 2 (current)" in text
    assert "completed g2" in cli_out("runs", "list")
    assert "(generation 2: continued as new 2x)" in cli_out("runs", "why", "g")
    res = CliRunner().invoke(cli, ["runs", "show", "g", "--generation", "5", "--db", url])
    assert res.exit_code != 0 and "has generations 0 to 2" in res.output


def test_replay_check_replays_the_current_generation_with_its_input(tmp_path: object) -> None:
    from durably.inspect.replaycheck import check_run

    url = f"sqlite:///{tmp_path}/j.db"

    def make(step_name: str) -> durably.Engine:
        engine = durably.Engine(url, park_wait_s=0)

        @engine.workflow(name="gens")
        def gens(ctx: durably.Context, n: int) -> object:
            # Generation 0 and 1 record "early"; generation 2 the name under test.
            ctx.step("early" if n < 2 else step_name, _key, n)
            if n < 2:
                return ctx.continue_as_new(n + 1)
            return ctx.wait_for_signal("go")

        return engine

    engine = make("late")
    with pytest.raises(durably.RunParked):
        engine.run("gens", 0, run_id="rc")
    run = engine.get_run("rc")
    assert run.generation == 2
    assert check_run(engine, run) is None  # generation 2, with input n=2, replays
    engine.close()
    changed = make("renamed")  # only the current generation's step differs
    found = check_run(changed, changed.get_run("rc"))
    assert found is not None and "'late'" in found.reason and "'renamed'" in found.reason
    changed.close()


def test_each_generation_asks_for_its_own_approval(journal_url: str) -> None:
    engine = durably.Engine(journal_url, park_wait_s=0)

    @engine.workflow(name="asks")
    def asks(ctx: durably.Context, n: int) -> str:
        d = ctx.request_approval("deploy", {"n": n})
        if n == 0:
            return ctx.continue_as_new(1)
        return f"{d.outcome} by {d.by}"

    with pytest.raises(durably.RunParked):
        engine.run(asks, 0, run_id="ap")
    (first,) = engine.pending_approvals("ap")
    assert first.request_id == "0"
    engine.approve("ap", "0", digest=first.digest, by="ana")
    with pytest.raises(durably.RunParked):  # generation 1 waits for a decision of its own
        engine.resume("ap")
    (second,) = engine.pending_approvals("ap")
    assert second.request_id == "g1.0"
    engine.approve("ap", "g1.0", digest=second.digest, by="bob")
    assert engine.resume("ap") == "approved by bob"
    engine.close()


def test_deleting_and_redacting_a_run_that_continued_as_new(journal_url: str) -> None:
    engine = durably.Engine(journal_url)

    @engine.workflow(name="gone")
    def gone(ctx: durably.Context, secret: str, n: int) -> int:
        ctx.step("k", _key, n)
        return n if n == 2 else ctx.continue_as_new(secret, n + 1)

    assert engine.run(gone, "s3cr3t", 0, run_id="red") == 2
    engine.delete_run("red", redact=True)
    gens = engine.generations("red")
    assert len(gens) == 2 and all("s3cr3t" not in g.input for g in gens)
    assert engine.run(gone, "s3cr3t", 0, run_id="del") == 2
    engine.delete_run("del")
    # The tombstone keeps generation 0's input digest: the same call is the pruned run.
    with pytest.raises(durably.RunPruned):
        engine.run(gone, "s3cr3t", 0, run_id="del")
    with pytest.raises(durably.RunConflict):
        engine.run(gone, "s3cr3t", 2, run_id="del")  # the last generation's input
    engine.close()


def test_a_hand_over_or_a_return_while_a_step_is_still_running_blocks_the_run(
    tmp_path: object,
) -> None:
    """``ctx.continue_as_new`` takes no position, so the scope's "still running" check of
    every other recording call never saw it: called inside a step's function, or while
    a step's task was in flight, it ended the generation with that step unrecorded (its
    effect done under a key of a generation that was over). A return did the same with a
    step task in flight. Both now block the run, as concurrent use does."""
    import asyncio

    engine = durably.Engine(f"sqlite:///{tmp_path}/j.db")

    @engine.workflow(name="instep")
    def instep(ctx: durably.Context, n: int) -> int:
        if n == 0:
            return ctx.step("s", lambda: ctx.continue_as_new(1))
        return n

    with pytest.raises(durably.ConfigError, match="still running"):
        engine.run(instep, 0, run_id="s")
    run = engine.store.get_run("s")
    assert run is not None and run.status == "blocked" and run.generation == 0

    @engine.workflow(name="inflight")
    async def inflight(ctx: durably.AsyncContext, n: int, done: bool) -> int:
        async def slow() -> int:
            await asyncio.sleep(30)
            return 1

        task = asyncio.ensure_future(ctx.step("slow", slow))
        await asyncio.sleep(0.05)  # the step is live now (its task started)
        assert not task.done()
        if done:
            return n  # a return with the step in flight
        return ctx.continue_as_new(n + 1, done)

    for rid, done in (("t", False), ("r", True)):
        with pytest.raises(durably.ConfigError, match="still running"):
            engine.run(inflight, 0, done, run_id=rid)
        run = engine.store.get_run(rid)
        assert run is not None and run.status == "blocked" and run.generation == 0
    engine.close()


def test_history_of_a_generation_the_run_does_not_have_is_refused(tmp_path: object) -> None:
    """``engine.history(run_id, generation=N)`` returned ``[]`` for a generation past the
    run's (a run that seemed to have done nothing there), read ``"1"`` as no records on
    SQLite and ``True`` as generation 1; only the CLI checked. Now the engine refuses
    what is not one of the run's generations, and the CLI says the same."""
    import json

    from click.testing import CliRunner

    from durably.cli import main as cli

    url = f"sqlite:///{tmp_path}/j.db"
    engine = durably.Engine(url)

    @engine.workflow(name="twice")
    def twice(ctx: durably.Context, n: int) -> int:
        ctx.step("k", _key, n)
        return n if n == 1 else ctx.continue_as_new(1)

    engine.run(twice, 0, run_id="t")
    assert [len(engine.history("t", generation=g)) for g in (0, 1)] == [1, 1]
    for bad in (2, -1, "1", True, 1.0):
        with pytest.raises(durably.ConfigError, match="generations 0 to 1"):
            engine.history("t", generation=bad)  # type: ignore[arg-type]
    engine.close()
    res = CliRunner().invoke(cli, ["runs", "show", "t", "--generation", "5", "--json", "--db", url])
    assert res.exit_code != 0 and "there is no generation 5" in json.loads(res.output)["error"]


def test_a_hand_over_inside_an_open_saga_blocks_the_run(journal_url: str) -> None:
    """Was: continue_as_new inside `with ctx.saga()` ended the generation with the
    block's compensations forgotten; a failure in the next generation undid only its own
    steps and left the booking in place. Now the run is blocked at the call, with nothing
    handed over; after the block the same hand-over works (each generation's saga is
    its own)."""
    undone: list[str] = []

    def book(item: str) -> str:
        return f"booked {item}"

    def unbook(item: str) -> None:
        undone.append(item)

    with durably.Engine(journal_url) as engine:

        @engine.workflow(name="inside")
        def inside(ctx: durably.Context, n: int) -> int:
            if n == 0:
                with ctx.saga() as saga:
                    saga.step("book", book, unbook, "hotel")
                    ctx.continue_as_new(1)
            raise RuntimeError("the next generation fails")

        with pytest.raises(durably.ConfigError, match=r"inside a `with ctx.saga\(\)` block"):
            engine.run(inside, 0, run_id="in")
        run = engine.get_run("in")
        assert (run.status, run.generation) == ("blocked", 0)

        @engine.workflow(name="after")
        def after(ctx: durably.Context, n: int) -> int:
            with ctx.saga() as saga:
                saga.step("book", book, unbook, f"hotel-{n}")
            if n == 0:
                return ctx.continue_as_new(1)
            with ctx.saga() as saga:
                saga.step("book", book, unbook, "car")
                raise RuntimeError("the next generation fails")

        with pytest.raises(durably.WorkflowFailed):
            engine.run(after, 0, run_id="after")
        assert engine.get_run("after").generation == 1
        assert undone == ["car"]  # generation 0's saga had closed: nothing of it pending
