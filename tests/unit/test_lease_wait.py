"""``engine.run`` on a leased run, ``engine.recover()``, and orphans in ``runs list``
(issue 8 §3 "Orphaned runs"), on both stores.

A dead-looking owner on another host (nothing shows it alive: a free advisory lock on
PostgreSQL; SQLite cannot see another host's processes) cannot be proven dead, so
``engine.run`` waits for its lease, saying why and until when, and a live owner's run is
followed to its outcome; either ends as soon as the run does (``RunLeased`` only with
``wait_for_lease=False``). Fake clocks: a dead-looking owner's wait advances the clock
instead of sleeping.
"""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

import durably
from durably.cli import main
from durably.clock import FakeClock
from durably.store.owner import Owner, host_id

LEASE_S = 30.0


@pytest.fixture
def clock() -> FakeClock:
    # Near real time: `runs list` judges leases by the real clock.
    return FakeClock(time.time())


@pytest.fixture
def engine(journal_url: str, clock: FakeClock) -> Iterator[durably.Engine]:
    eng = durably.Engine(journal_url, clock=clock, lease_s=LEASE_S)
    _register(eng)
    yield eng
    eng.close()


def _register(eng: durably.Engine) -> None:
    @eng.workflow(name="double")
    def double(ctx: durably.Context, x: int) -> int:
        return int(ctx.step("double", lambda: 2 * x))


def gone_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def twin_owner() -> Owner:
    """An owner on another machine that shares this one's node name and pid namespace."""
    _machine, boot, ns = host_id().split(":")
    return Owner(Owner.current().host, gone_pid(), "1", f"{'f' * 32}:{boot}:{ns}")


def held_by(engine: durably.Engine, owner: Owner, run_id: str = "r") -> None:
    """Create run ``run_id`` of ``double(21)`` and give ``owner`` its lease."""
    engine.start("double", 21, run_id=run_id)
    engine.store.claim(run_id, owner, LEASE_S, 10, lambda _: False)


def test_run_waits_for_a_dead_looking_owner_on_another_host(
    engine: durably.Engine, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    held_by(engine, twin_owner())
    start = clock.time()
    with caplog.at_level(logging.WARNING, logger="durably"):
        assert engine.run("double", 21, run_id="r") == 42
    assert clock.time() >= start + LEASE_S  # it waited for the lease, no less
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "waiting for its lease to expire" in said and "until" in said


def test_fail_fast_option_raises_run_leased_at_once(journal_url: str, clock: FakeClock) -> None:
    with durably.Engine(journal_url, clock=clock, lease_s=LEASE_S, wait_for_lease=False) as eng:
        _register(eng)
        held_by(eng, twin_owner())
        start = clock.time()
        with pytest.raises(durably.RunLeased):
            eng.run("double", 21, run_id="r")
        assert clock.time() == start


def test_fail_fast_refuses_a_live_owner_on_this_host_at_once(
    journal_url: str, clock: FakeClock
) -> None:
    with durably.Engine(journal_url, clock=clock, lease_s=LEASE_S, wait_for_lease=False) as eng:
        _register(eng)
        held_by(eng, Owner.current())  # this very process: another thread may drive it
        start = clock.time()
        with pytest.raises(durably.RunLeased):
            eng.run("double", 21, run_id="r")
        assert clock.time() == start


def finish_soon(engine: durably.Engine, run_id: str = "r", after_s: float = 0.3) -> None:
    """Finish ``run_id`` as its owner would, ``after_s`` from now (another thread)."""
    token = engine.get_run(run_id).fencing_token

    def finish() -> None:
        time.sleep(after_s)
        engine.store.finish(run_id, token, "completed", [], outcome="42")

    threading.Thread(target=finish, daemon=True).start()


def test_run_follows_a_live_owner_on_this_host_to_its_outcome(
    engine: durably.Engine, clock: FakeClock
) -> None:
    held_by(engine, Owner.current())  # this very process: another thread drives it
    token = engine.get_run("r").fencing_token
    finish_soon(engine)
    start = clock.time()
    assert engine.run("double", 21, run_id="r") == 42  # its outcome, not run here
    assert clock.time() == start  # followed, not waited out
    assert engine.get_run("r").fencing_token == token  # never claimed from its owner


def test_run_returns_as_soon_as_a_dead_looking_owners_run_ends(journal_url: str) -> None:
    # Real time: an owner on another host that finishes long before its lease ends. The
    # call used to sleep to the lease's end (LEASE_S here) before looking again.
    with durably.Engine(journal_url, lease_s=LEASE_S) as eng:
        _register(eng)
        held_by(eng, twin_owner())
        finish_soon(eng)
        start = time.monotonic()
        assert eng.run("double", 21, run_id="r") == 42
        assert time.monotonic() - start < LEASE_S / 3


class RenewingClock(FakeClock):
    """A fake clock whose sleep lets the owner renew its lease: the owner is alive."""

    def __init__(self) -> None:
        super().__init__()
        self.renew: list[object] = []

    def sleep(self, seconds: float) -> None:
        self.advance(seconds)
        for fn in self.renew:
            fn()  # type: ignore[operator]


def test_an_owner_that_renews_while_we_wait_is_followed_to_its_outcome(journal_url: str) -> None:
    clock = RenewingClock()
    with durably.Engine(journal_url, clock=clock, lease_s=LEASE_S) as eng:
        _register(eng)
        twin = twin_owner()
        held_by(eng, twin)
        token = eng.get_run("r").fencing_token
        beats: list[int] = []

        def beat() -> None:
            beats.append(1)
            if len(beats) < 3:
                assert eng.store.renew("r", token, LEASE_S)
            else:  # the owner finishes its run
                eng.store.finish("r", token, "completed", [], outcome="42")

        clock.renew.append(beat)
        assert eng.run("double", 21, run_id="r") == 42
        assert len(beats) == 3  # the owner renewed twice: followed, never taken from it
        assert eng.get_run("r").fencing_token == token


@pytest.mark.postgres
def test_an_owner_holding_its_advisory_lock_is_alive(pg_url: str, clock: FakeClock) -> None:
    twin = twin_owner()
    with durably.Engine(pg_url, clock=clock, lease_s=LEASE_S) as eng:
        _register(eng)
        other = durably.Engine(pg_url, clock=clock)
        try:
            other.store.hold_owner(twin)  # the twin's process is connected: alive
            held_by(eng, twin)
            start = clock.time()
            eng.wait_for_lease = False
            with pytest.raises(durably.RunLeased):
                eng.run("double", 21, run_id="r")
            eng.wait_for_lease = True
            # Followed (in real time: it is alive) to the outcome it records.
            finish_soon(eng)
            assert eng.run("double", 21, run_id="r") == 42
            assert clock.time() == start
            held_by(eng, twin, "r2")
        finally:
            other.close()
        # Its lock freed (its connection gone): dead-looking now, so the run waits. The
        # server frees a closed session's lock a moment after the close returns.
        deadline = time.monotonic() + 10
        while eng.store.owners_without_lock([str(twin)]) != {str(twin)}:
            assert time.monotonic() < deadline, "the closed session's lock was never freed"
            time.sleep(0.02)
        assert eng.run("double", 21, run_id="r2") == 42
        assert clock.time() >= start + LEASE_S  # its lease waited out, then taken over


def test_recover_resumes_only_runs_of_this_hosts_dead_processes(
    engine: durably.Engine, clock: FakeClock
) -> None:
    me = Owner.current()
    held_by(engine, Owner(me.host, gone_pid(), "1", me.host_id), "dead-here")
    held_by(engine, twin_owner(), "twin")
    held_by(engine, me, "alive-here")
    engine.start("double", 21, run_id="queued")
    start = clock.time()
    assert engine.recover() == {"dead-here": 42}
    assert engine.get_run("dead-here").status == "completed"
    assert {engine.get_run(r).status for r in ("twin", "alive-here")} == {"running"}
    assert engine.get_run("queued").status == "queued"  # workers take queued runs
    assert clock.time() == start  # nothing waited
    assert engine.recover() == {}


def test_recover_waits_for_the_leases_of_an_earlier_boot_of_this_machine(
    engine: durably.Engine, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    # After a reboot every process of the previous boot is gone, but a cloned machine
    # sharing the machine id would look the same, so the lease is waited for, not broken.
    machine, _boot, ns = host_id().split(":")
    held_by(engine, Owner("node", 4242, "1", f"{machine}:{'e' * 32}:{ns}"), "before-reboot")
    held_by(engine, Owner("node", 4242, "1", f"{'f' * 32}:{'e' * 32}:{ns}"), "elsewhere")
    start = clock.time()
    with caplog.at_level(logging.WARNING, logger="durably"):
        assert engine.recover() == {"before-reboot": 42}
    assert clock.time() >= start + LEASE_S
    assert "waiting for its lease to expire" in caplog.text
    assert engine.get_run("elsewhere").status == "running"


def test_runs_list_shows_owner_lease_and_orphans(
    engine: durably.Engine, clock: FakeClock, journal_url: str
) -> None:
    me = Owner.current()
    held_by(engine, Owner(me.host, gone_pid(), "1", me.host_id), "dead-here")
    held_by(engine, me, "alive-here")
    runner = CliRunner()
    out = runner.invoke(main, ["runs", "list", "--db", journal_url, "--json"])
    assert out.exit_code == 0, out.output
    rows = {r["run_id"]: r for r in json.loads(out.output)}
    assert rows["dead-here"]["orphaned"] is True
    assert rows["alive-here"]["orphaned"] is False
    assert rows["alive-here"]["owner_pid"] == me.pid
    assert rows["alive-here"]["owner_host"] == me.host
    assert rows["alive-here"]["lease_expires_at"] == clock.time() + LEASE_S
    table = runner.invoke(main, ["runs", "list", "--db", journal_url], env={"COLUMNS": "250"})
    assert table.exit_code == 0, table.output
    line = next(ln for ln in table.output.splitlines() if "dead-here" in ln)
    assert "orphaned" in line and f"{me.host}:" in line


def test_runs_list_shows_a_crafted_owner_as_text(engine: durably.Engine, journal_url: str) -> None:
    # An owner string is journal data: markup in it is printed, never interpreted.
    held_by(engine, Owner("[/link][bold]x", 1, "1", "m:b:1"))
    out = CliRunner().invoke(main, ["runs", "list", "--db", journal_url], env={"COLUMNS": "250"})
    assert out.exit_code == 0, out.output
    assert "[/link][bold]x:1" in out.output


def test_recover_pages_through_every_running_run(
    engine: durably.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A scan of one query used to stop at RECOVER_SCAN_MAX (10,000) running runs, so a
    # host with more orphans than that recovered only the newest ones: a page of 2 here
    # stands for it, with live runs in between so the dead ones straddle the pages.
    import durably.ownership

    monkeypatch.setattr(durably.ownership, "RECOVER_SCAN_MAX", 2)
    me = Owner.current()
    dead = [f"dead-{i}" for i in range(5)]
    for i, run_id in enumerate(dead):
        held_by(engine, Owner(me.host, gone_pid(), "1", me.host_id), run_id)
        held_by(engine, me, f"alive-{i}")
    assert engine.recover() == dict.fromkeys(dead, 42)
    assert {engine.get_run(r).status for r in dead} == {"completed"}


def test_the_wait_message_names_the_date_of_a_lease_that_ends_on_another_day() -> None:
    """Was: ``until 00:00:30 UTC`` for a lease ending after midnight, read at 23:59 as a
    time already past; a time of another day now carries its date (as `runs why` does)."""
    from durably.ownership import LeaseWait

    owner = str(Owner("elsewhere", 4242, "b" * 32))
    tomorrow = time.time() + 86_400
    said = LeaseWait("r", owner, 1, tomorrow).message()
    day = time.strftime("%Y-%m-%d", time.gmtime(tomorrow))
    assert f"until {day} " in said, said
    soon = LeaseWait("r", owner, 1, time.time() + 5).message()
    assert re.search(r"until (\S+ )?\d\d:\d\d:\d\d UTC;", soon), soon
