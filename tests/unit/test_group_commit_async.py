"""Group commit for async runs (issue 28): the appends of the async runs of one event
loop share commits; each caller goes on only after the commit that carries its record; a
lone run's appends are written at once; a stale record fails its own run alone."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import durably
from durably.clock import FakeClock
from durably.errors import LeaseLost
from durably.runtime import joincommit
from durably.store.open import open_store

from ..contract.test_store_contract import ME, alive, new_run, rec


async def _step(i: int) -> dict[str, int]:
    return {"i": i}


def _engine(url: str) -> tuple[durably.Engine, Any]:
    engine = durably.Engine(url)

    @engine.workflow(name="many")
    async def many(ctx: durably.AsyncContext, n: int) -> int:
        for i in range(n):
            await ctx.step("s", _step, i)
        return n

    return engine, many


def test_async_runs_on_one_loop_share_commits(journal_url: str) -> None:
    engine, many = _engine(journal_url)
    ids = [f"r{k}-{uuid.uuid4().hex[:4]}" for k in range(8)]

    async def main() -> list[int]:
        return list(await asyncio.gather(*(engine.run_async(many, 5, run_id=r) for r in ids)))

    assert asyncio.run(main()) == [5] * 8
    group = engine.store._group  # type: ignore[attr-defined]
    # Without joining, each of the 40 step appends commits alone (batches stays 0).
    assert group.batches >= 3 and group.batched >= 3 * 8
    for run_id in ids:
        assert [r.position for r in engine.history(run_id)] == ["0", "1", "2", "3", "4"]
        kinds = [e.kind for e in engine.events(run_id).events]
        assert kinds.count("step.completed") == 5
    assert joincommit._LOOPS == {} or all(not v for v in joincommit._LOOPS.values())
    engine.close()


def test_a_lone_async_run_writes_at_once(tmp_path: Any) -> None:
    engine, many = _engine(f"sqlite:///{tmp_path / 'j.db'}")
    queued: list[str] = []
    real = joincommit.LoopAppends.append

    async def spy(self: Any, run_id: str, *args: Any) -> bool:
        queued.append(run_id)
        return await real(self, run_id, *args)

    joincommit.LoopAppends.append = spy  # type: ignore[method-assign]
    try:
        assert asyncio.run(engine.run_async(many, 4, run_id="lone")) == 4
    finally:
        joincommit.LoopAppends.append = real  # type: ignore[method-assign]
    assert queued == []  # never queued: its appends took the direct path
    assert engine.store._group.batches == 0  # type: ignore[attr-defined]
    engine.close()


def test_each_caller_goes_on_only_after_its_commit(tmp_path: Any) -> None:
    store: Any = open_store(f"sqlite:///{tmp_path / 'j.db'}", FakeClock())
    tokens = {}
    for run_id in ("a", "b", "c"):
        store.create_run(new_run(run_id))
        tokens[run_id] = store.claim(run_id, ME, 30, 10, alive).fencing_token
    committed: list[list[str]] = []
    real = store.append_all

    def noting(items: Any) -> None:
        real(items)
        committed.append([i.run_id for i in items])

    store.append_all = noting
    seen: dict[str, list[list[str]]] = {}

    async def one(shared: joincommit.LoopAppends, run_id: str, token: int) -> None:
        await shared.append(run_id, token, [rec("0")], ())
        seen[run_id] = [list(c) for c in committed]  # what was committed when it went on

    async def main() -> None:
        state = joincommit.LoopAppends(asyncio.get_running_loop(), store)
        stale = one(state, "c", tokens["c"] + 1)  # a stale token: fails alone
        results = await asyncio.gather(
            one(state, "a", tokens["a"]),
            one(state, "b", tokens["b"]),
            stale,
            return_exceptions=True,
        )
        assert isinstance(results[2], LeaseLost) and results[:2] == [None, None]

    asyncio.run(main())
    assert committed == [["a", "b", "c"]]  # one shared commit for all three
    assert seen == {"a": [["a", "b", "c"]], "b": [["a", "b", "c"]]}
    assert [r.position for r in store.load_history("a", 0)] == ["0"]
    assert [r.position for r in store.load_history("b", 0)] == ["0"]
    assert store.load_history("c", 0) == []
    store.close()


def test_a_caller_cancelled_before_the_flush_withdraws_its_append(tmp_path: Any) -> None:
    store: Any = open_store(f"sqlite:///{tmp_path / 'j.db'}", FakeClock())
    for run_id in ("a", "b"):
        store.create_run(new_run(run_id))
    tokens = {r: store.claim(r, ME, 30, 10, alive).fencing_token for r in ("a", "b")}

    async def main() -> None:
        state = joincommit.LoopAppends(asyncio.get_running_loop(), store)
        gone = asyncio.ensure_future(state.append("a", tokens["a"], [rec("0")], ()))
        kept = asyncio.ensure_future(state.append("b", tokens["b"], [rec("0")], ()))
        await asyncio.sleep(0)  # both queued, the flush not run yet... (it runs next)
        gone.cancel()
        assert await kept is False
        assert gone.cancelled()

    asyncio.run(main())
    assert store.load_history("a", 0) == []
    assert [r.position for r in store.load_history("b", 0)] == ["0"]
    store.close()
