"""SQLite files only their owner can read.

A journal holds prompts, tool outputs and whatever secrets a step was called with, and the
receiving side's database holds stored responses; created under the usual umask 022 they
would be readable by every local user (0644). A new database file is created here 0600
before SQLite opens it, and SQLite gives its ``-wal`` and ``-shm`` files the mode of the
database file, so they are 0600 too. An existing file readable or writable by others is
left as it is (its owner may share it with a group on purpose) and gets one warning per
process on the ``durably`` logger, naming the ``chmod`` to run. A path that is a symlink
to a file not there yet gets its target created 0600 the same way.
"""

from __future__ import annotations

import os
import stat
import threading

from .._log import LazyLogger

__all__ = ["open_private"]

log = LazyLogger("durably")

_SUFFIXES = ("", "-wal", "-shm")
_warned: set[str] = set()
_warned_lock = threading.Lock()


def open_private(path: str, what: str = "journal") -> None:
    """Create the SQLite database file ``path`` with mode 0600 unless it exists; when it
    (or its ``-wal``/``-shm``) exists with permissions for others, warn once.

    Errors creating it (a missing folder, a read-only one) are left for SQLite to report
    as it opens the file. ``:memory:`` and Windows (no POSIX modes) are skipped.
    """
    if path == ":memory:" or not path or os.name == "nt":
        return
    if not _create_private(path):
        if os.path.islink(path) and not os.path.exists(path):
            # A symlink to a file not there yet: the exclusive create refuses the link
            # itself, and SQLite would create the target with the umask's mode.
            target = os.path.realpath(path)
            if target != path and _create_private(target):
                return
        _warn_if_shared(path, what)


def _create_private(path: str) -> bool:
    """Create ``path`` 0600 if nothing is there (not even a symlink); True if it did.
    Other errors (a missing folder, a read-only one) are left for SQLite to report as
    it opens the file, in the store's words."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError:
        return False
    os.close(fd)
    return True


def _warn_if_shared(path: str, what: str) -> None:
    shared = []
    for suffix in _SUFFIXES:
        try:
            mode = os.stat(path + suffix).st_mode
        except OSError:
            continue
        if stat.S_ISREG(mode) and mode & 0o077:
            shared.append((path + suffix, stat.S_IMODE(mode)))
    if not shared:
        return
    key = os.path.realpath(path)
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    import shlex  # for this warning only: not a cost of every start

    modes = ", ".join(f"{p} is {m:04o}" for p, m in shared)
    log.warning(
        "durably: the %s %s can be read by other local users (%s); it holds prompts,"
        " tool outputs and any secrets steps were called with: run `chmod 600 %s`",
        what,
        path,
        modes,
        " ".join(shlex.quote(p) for p, _ in shared),
    )
