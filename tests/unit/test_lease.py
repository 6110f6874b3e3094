"""The engine keeps the lease of the run it drives, for as long as the run lasts."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

import durably
from durably.store.base import Owner
from durably.store.open import open_store

RIVAL = Owner("another-host", 4242, "1")


def wait_until(cond: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_run_longer_than_several_leases_keeps_its_lease(tmp_path: Path, kind: str) -> None:
    """Time moves on a fake clock (so the test never sleeps a lease away); the engine's
    heartbeat runs on real time, every 10 ms. After each jump of 2/3 of a lease, the
    renewal must move ``lease_expires_at`` to a full lease from the new now, and a rival
    on another host must still be refused; over five jumps (more than three leases), the
    run never changes hands and its steps keep their token."""
    url = f"sqlite:///{tmp_path / 'j.db'}"
    clock = durably.FakeClock()
    engine = durably.Engine(url, clock=clock, lease_s=30, heartbeat_s=0.01)
    rival = open_store(url, clock)
    expiries: list[float] = []

    def lease_expires_at() -> float:
        run = rival.get_run("long")
        assert run is not None and run.lease_expires_at is not None
        return run.lease_expires_at

    def long_step(*, fencing_token: int) -> int:
        for _ in range(5):
            clock.advance(20)
            wait_until(
                lambda: lease_expires_at() == clock.time() + 30, 20, "the heartbeat to renew"
            )
            expiries.append(lease_expires_at())
            with pytest.raises(durably.RunLeased):
                rival.claim("long", RIVAL, 30, 10, lambda _: False)  # cannot prove death
        return fencing_token

    if kind == "sync":

        @engine.workflow(name="long")
        def wf(ctx: durably.Context) -> list[int]:
            return [ctx.step("long", long_step), ctx.step("after", lambda: 0)]

    else:

        @engine.workflow(name="long")
        async def awf(ctx: durably.AsyncContext) -> list[int]:
            return [await ctx.step("long", long_step), await ctx.step("after", lambda: 0)]

    try:
        assert engine.run("long", run_id="long") == [1, 0]
        assert expiries == sorted(set(expiries)) and len(expiries) == 5
        run = engine.get_run("long")
        assert (run.status, run.starts, run.fencing_token) == ("completed", 1, 1)
        assert run.owner is None  # finishing gave the lease back
    finally:
        rival.close()
        engine.close()


@pytest.mark.parametrize("refused", ["renewal", "write"])
def test_a_refusal_after_the_own_deadline_passed_says_so(tmp_path: Path, refused: str) -> None:
    """A driver paused past its lease (here on a fake clock; in the fleet a SIGSTOP) and
    taken over meanwhile learns of it from a refused renewal (after a retry's backoff), a
    refused write (the workflow's failure recorded) or its own deadline check, whichever
    runs first; the reason it gives is the same every way: its own deadline, which it
    knows, not a takeover it can only infer. (The fleet test of a SIGSTOPped worker on
    PostgreSQL failed when the renewal won the race.)"""
    url = f"sqlite:///{tmp_path / 'j.db'}"
    clock = durably.FakeClock()
    # The heartbeat never beats: the renewal after the backoff is the one that is refused.
    engine = durably.Engine(url, clock=clock, lease_s=3600, heartbeat_s=3000)
    rival = open_store(url, clock)
    attempts: list[int] = []

    @durably.step(retries=1, backoff=1.0)
    def flaky() -> int:
        attempts.append(1)
        if len(attempts) == 1:
            clock.advance(3601)  # past the lease: the rival may take the run
            rival.claim("paused", RIVAL, 30, 10, lambda _: False)
            raise ConnectionError("the first attempt fails; the backoff follows")
        return 1

    @engine.workflow(name="paused")
    def wf(ctx: durably.Context) -> int:
        return ctx.step("flaky", flaky) if refused == "renewal" else flaky()

    with pytest.raises(durably.StaleLease) as caught:
        engine.run(wf, run_id="paused")
    assert caught.value.reason is not None, caught.value
    assert "past its lease deadline" in caught.value.reason
    assert caught.value.taken  # and the journal said another owner has it
    assert "another owner has claimed the run" in str(caught.value)
    assert attempts == [1]  # the second attempt never ran here


@pytest.mark.parametrize("wait", ["timer", "signal"])
def test_a_park_refused_because_another_claim_took_the_run_is_a_stale_lease(
    tmp_path: Path, wait: str
) -> None:
    """Another owner takes the run over (its token raised) after the last step's record
    and before the park's write: the refused park must end the attempt as a lost lease
    (``StaleLease``), never let the internal ``Parked`` it was recording escape
    ``engine.run`` (a worker thread would die of it). Found by durably.chaos.dst: the
    refusal returned the stop latched first, the park itself."""
    url = f"sqlite:///{tmp_path / 'j.db'}"
    clock = durably.FakeClock()
    rival = open_store(url, clock)

    def take_over(run_id: str, position: str, name: str, window: str) -> None:
        if name == "last" and window == "recorded":
            rival.claim(run_id, RIVAL, 30, 10, lambda _: True)  # its owner judged gone

    engine = durably.Engine(url, clock=clock, fault_hook=take_over, park_wait_s=0)

    @engine.workflow(name="parks")
    def wf(ctx: durably.Context) -> None:
        ctx.step("last", lambda: 1)
        if wait == "timer":
            ctx.sleep(60)
        else:
            ctx.wait_for_signal("go")

    with pytest.raises(durably.StaleLease):
        engine.run(wf, run_id="p")
    run = rival.get_run("p")
    assert run is not None and run.owner is not None and run.owner.startswith("another-host")
    engine.close()
    rival.close()
