"""Owner identity and liveness (issue 8 §3, issue 9 §3 "Owner names").

A host is a machine id, a boot id and a pid namespace; the node name and ``DURABLY_HOST``
are labels only. Two hosts that share a label (and, outside containers, the initial
pid-namespace inode) must never judge each other's live runs dead.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from durably.clock import FakeClock
from durably.ownership import check_clock
from durably.store import owner as owner_mod
from durably.store.owner import Owner, host_id
from durably.store.sqlite import SQLiteStore


def gone_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _parts() -> tuple[str, str, str]:
    machine, boot, ns = host_id().split(":")
    return machine, boot, ns


def test_this_process_is_alive_and_a_gone_pid_of_this_host_is_dead() -> None:
    me = Owner.current()
    assert me.host_id == host_id() and me.same_host()
    assert not me.provably_dead()
    gone = Owner(me.host, gone_pid(), "1", me.host_id)
    assert gone.provably_dead()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_a_killed_owner_its_parent_has_not_reaped_is_dead() -> None:
    # A worker SIGKILLed under a supervisor that has not waited for it yet is a zombie:
    # its pid still answers kill(0), but it runs no code, so its runs are taken over now.
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        me = Owner.current()
        started = owner_mod._process_start(p.pid)
        assert started is not None
        victim = Owner(me.host, p.pid, started, me.host_id)
        assert not victim.provably_dead()
        p.kill()
        deadline = time.monotonic() + 60
        while owner_mod._process_stat(p.pid) not in ((s, started) for s in ("Z", "X")):
            assert time.monotonic() < deadline, "the killed child never became a zombie"
            time.sleep(0.01)
        assert victim.provably_dead()
    finally:
        p.kill()
        p.wait()


@pytest.mark.parametrize("which", [0, 1], ids=["machine id", "boot id"])
def test_a_twin_host_with_the_same_name_and_pid_namespace_is_never_judged_dead(
    which: int,
) -> None:
    # Two machines outside containers: same node name, same initial pid-ns inode, and
    # this pid is gone here; only the machine id (or, for a clone, the boot id) differs.
    parts = list(_parts())
    parts[which] = "f" * 32
    twin = Owner(os.uname().nodename, gone_pid(), "1", ":".join(parts))
    assert not twin.same_host()
    assert not twin.provably_dead()


def test_durably_host_is_a_label_and_never_the_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    # Two containers given the same DURABLY_HOST differ by pid namespace: the other one's
    # pids mean nothing here, so none of its runs is ever taken for dead.
    monkeypatch.setenv("DURABLY_HOST", "web")
    me = Owner.current()
    assert me.host == "web" and me.host_id == host_id()
    machine, boot, _ns = _parts()
    other_container = Owner("web", gone_pid(), "1", f"{machine}:{boot}:4026599999")
    assert not other_container.provably_dead()
    # And the label cannot break the owner string's format.
    monkeypatch.setenv("DURABLY_HOST", "a|b")
    assert Owner.parse(str(Owner.current())) == Owner.current()


def test_machine_id_override_keeps_boot_id_and_pid_namespace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = _parts()
    monkeypatch.setenv("DURABLY_MACHINE_ID", "image-without-one")
    monkeypatch.setattr(owner_mod, "_HOST_ID_CACHE", None)
    try:
        machine, boot, ns = host_id().split(":")
        assert machine == "image-without-one"
        assert (boot, ns) == real[1:]  # boot id and pid namespace are always read
    finally:
        monkeypatch.setattr(owner_mod, "_HOST_ID_CACHE", None)


def test_old_owner_strings_parse_and_are_never_judged_dead() -> None:
    # Written by durably before host ids: "node/pidns|pid|start". Even on this very node
    # with its pid gone, the writer may have been a twin machine: only the lease frees it.
    ns = _parts()[2]
    old = f"{os.uname().nodename}/{ns}|{gone_pid()}|123"
    parsed = Owner.parse(old)
    assert parsed is not None and parsed.host_id == "" and str(parsed) == old
    assert not parsed.provably_dead()


@pytest.mark.parametrize(
    "text",
    [
        "",
        "a|b|c",
        "a|1",
        "a|1|2|3|4",
        "a|²|1",  # a unicode digit int() would accept
        "a|12345678901|1",  # more digits than any pid
        "a|1|1|bad id",  # a host id with a space
        "a|1|1|%_",  # LIKE wildcards
        "a|1|1|",
        "x" * 10_000,
        "a|1|1|" + "m" * 1000,
    ],
)
def test_crafted_owner_strings_are_not_owners(text: str) -> None:
    assert Owner.parse(text) is None


def test_parse_never_raises_and_pid_checks_are_safe() -> None:
    assert Owner.parse(None) is None
    assert Owner.parse(12) is None
    # The largest pid the format admits is no process and never crashes the check.
    huge = Owner.parse(f"a|9999999999|1|{host_id()}")
    assert huge is not None and huge.provably_dead() is False  # unprovable: lease decides


def test_sqlite_has_no_clock_of_its_own(tmp_path: Path) -> None:
    # SQLite runs on this host, so there is nothing to compare; a fake clock far off the
    # real one is no reason to warn.
    store = SQLiteStore(f"sqlite:///{tmp_path / 'j.db'}", FakeClock(0))
    try:
        assert check_clock(store, store.clock) is None
    finally:
        store.close()
