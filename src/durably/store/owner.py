"""Who drives a run, and when that driver is provably gone.

An owner is a process: its host, its pid and the pid's start time (so a reused pid is
never taken for the owner). A *host* is what a pid is meaningful on: one machine
(``/etc/machine-id``), one boot of it (``/proc/sys/kernel/random/boot_id``: pids start
over after a reboot) and one pid namespace (containers number their pids apart). The node
name is no identity: two machines outside containers may share it and share the initial
pid-namespace inode too, and must never judge each other's live pids dead. The node name
(or ``DURABLY_HOST``) is kept as a label for people; it never decides liveness.

Owner strings are stored in the journal, so a crafted row is untrusted input: parsing
bounds every field and never raises.
"""

from __future__ import annotations

import os
import re

from .._record import Record, set_field

OWNER_CHARS_MAX = 512  # a longer owner string is not one durably wrote
LABEL_CHARS_MAX = 64
HOST_ID_CHARS_MAX = 160
PID_DIGITS_MAX = 10
_MACHINE_ID_FILES = ("/etc/machine-id", "/var/lib/dbus/machine-id")
_BOOT_ID_FILE = "/proc/sys/kernel/random/boot_id"
_PID = re.compile(rf"[0-9]{{1,{PID_DIGITS_MAX}}}")
# A host id is made only of these, so it is safe inside a SQL LIKE pattern (no % or _)
# and cannot contain the owner string's separator.
_HOST_ID = re.compile(rf"[0-9A-Za-z.:-]{{1,{HOST_ID_CHARS_MAX}}}")
_UNSAFE = re.compile(r"[^0-9A-Za-z.:-]")
_EXITED = ("Z", "X")  # /proc/<pid>/stat states of a process that has exited


class Owner(Record, frozen=True):
    """Who drives a run: ``host`` (a label for people: the node name or ``DURABLY_HOST``),
    ``pid``, the pid's start time, and ``host_id`` (machine id, boot id and pid namespace:
    the identity that decides whether the pid can be checked from here).

    An owner without ``host_id`` was written by durably before host ids existed (or built
    by hand): it is shown, but never judged dead; its lease expires instead.
    """

    __slots__ = ("host", "host_id", "pid", "started")

    host: str
    pid: int
    started: str
    host_id: str

    def __init__(self, host: str, pid: int, started: str, host_id: str = "") -> None:
        set_field(self, "host", host)
        set_field(self, "pid", pid)
        set_field(self, "started", started)
        set_field(self, "host_id", host_id)

    def __str__(self) -> str:
        base = f"{self.host}|{self.pid}|{self.started}"
        return f"{base}|{self.host_id}" if self.host_id else base

    @classmethod
    def parse(cls, text: object) -> Owner | None:
        """Read an owner string written by ``str(owner)`` (old three-field strings too);
        None if it is not one. Never raises: the text comes from a journal row."""
        if not isinstance(text, str) or len(text) > OWNER_CHARS_MAX:
            return None
        parts = text.split("|")
        if len(parts) not in (3, 4) or not _PID.fullmatch(parts[1]):
            return None
        host_id = parts[3] if len(parts) == 4 else ""
        if len(parts) == 4 and not _HOST_ID.fullmatch(host_id):
            return None
        return cls(parts[0], int(parts[1]), parts[2], host_id)

    @classmethod
    def current(cls) -> Owner:
        """The owner identity of this process."""
        pid = os.getpid()
        return cls(host_label(), pid, _process_start(pid) or "?", host_id())

    def same_host(self) -> bool:
        """True when this owner's pid can be checked from this process: the same machine,
        boot and pid namespace. Old owners (no host id) never are."""
        return bool(self.host_id) and self.host_id == host_id()

    def earlier_boot_here(self) -> bool:
        """True when this owner ran on this machine (same machine id) in another boot.
        Not proof of death: a cloned machine may share the machine id, so such an owner's
        run is only waited for (its lease), never taken at once."""
        if not self.host_id:
            return False
        theirs, ours = self.host_id.split(":"), host_id().split(":")
        return (
            len(theirs) == 3 and bool(theirs[0]) and theirs[0] == ours[0] and theirs[1] != ours[1]
        )

    def host_pattern(self) -> str:
        """A SQL LIKE pattern matching the owner strings of this owner's host (host ids
        hold no LIKE wildcards); for an old owner, those with its label."""
        if self.host_id:
            return "%|" + self.host_id
        return self.host.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "|%"

    def provably_dead(self) -> bool:
        """True only when this owner is on this host and its process is gone (or its pid
        now belongs to a newer process).

        A process on another host can never be proven dead from here: its lease must
        expire instead.
        """
        if not self.same_host():
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except (PermissionError, OverflowError, ValueError):
            return False  # exists, owned by someone else (or a pid this OS cannot name)
        stat = _process_stat(self.pid)
        if stat is None:
            return False
        state, started = stat
        if started == self.started and state in _EXITED:
            return True  # a zombie its parent has not reaped yet: it runs no code
        # A pid reused by a newer process means the owner itself is gone.
        return self.started != "?" and started != self.started


def host_label() -> str:
    """This host as people name it: ``DURABLY_HOST`` if set, else the node name (made safe
    for the owner string). A label only: two hosts may share one."""
    # os.uname avoids importing socket (import time counts toward resume time).
    label = os.environ.get("DURABLY_HOST") or os.uname().nodename
    return label.replace("|", "_")[:LABEL_CHARS_MAX] or "?"


_HOST_ID_CACHE: tuple[int, str] | None = None


def host_id() -> str:
    """This host's identity: ``machine:boot:pidns``, read once per process.

    ``DURABLY_MACHINE_ID`` overrides the machine id (for images without one); the boot id
    and pid namespace are always read, so two containers given the same value still never
    treat each other's pids as their own. Where neither a machine id nor a boot id exists
    (macOS, BSD) the node name stands in for them: those systems have no pid namespaces.
    """
    global _HOST_ID_CACHE
    pid = os.getpid()
    if _HOST_ID_CACHE is None or _HOST_ID_CACHE[0] != pid:  # a forked child may unshare
        _HOST_ID_CACHE = (pid, _read_host_id())
    return _HOST_ID_CACHE[1]


def _read_host_id() -> str:
    machine = os.environ.get("DURABLY_MACHINE_ID") or _read_first(_MACHINE_ID_FILES)
    boot = _read_first((_BOOT_ID_FILE,))
    if not machine and not boot:
        machine = "node-" + os.uname().nodename
    try:
        ns = os.readlink("/proc/self/ns/pid")  # e.g. "pid:[4026531836]"
    except OSError:
        ns = ""
    ns = ns[5:-1] if ns.startswith("pid:[") and ns.endswith("]") else ""
    text = ":".join(_UNSAFE.sub("", part)[:48] for part in (machine, boot, ns))
    return text[:HOST_ID_CHARS_MAX]


def _read_first(paths: tuple[str, ...]) -> str:
    for path in paths:
        try:
            with open(path, encoding="ascii", errors="replace") as f:
                text = f.read(128).strip()
        except OSError:
            continue
        if text:
            return text
    return ""


def _process_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux), else None."""
    stat = _process_stat(pid)
    return None if stat is None else stat[1]


def _process_stat(pid: int) -> tuple[str, str] | None:
    """The process's state letter and start time in clock ticks since boot (Linux), else
    None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces; fields after its ')' are fixed.
    rest = data[data.rfind(b")") + 2 :].split()
    return (rest[0].decode(), rest[19].decode()) if len(rest) > 19 else None
