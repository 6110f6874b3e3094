"""SQLite files only their owner can read.

A journal holds prompts, tool outputs and whatever secrets a step was called with, and the
receiving side's database holds stored responses; created under the usual umask 022 they
would be readable by every local user (0644). A new database file is created here 0600
before SQLite opens it, and SQLite gives its ``-wal`` and ``-shm`` files the mode of the
database file, so they are 0600 too. An existing file readable or writable by others is
left as it is (its owner may share it with a group on purpose) and gets one warning per
process on the ``durably`` logger, naming the ``chmod`` to run.
"""

from __future__ import annotations

import logging
import os
import shlex
import stat
import threading

__all__ = ["open_private"]

log = logging.getLogger("durably")

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
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        _warn_if_shared(path, what)
        return
    except OSError:
        return  # SQLite's own open says what is wrong, in the store's words
    os.close(fd)


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
    modes = ", ".join(f"{p} is {m:04o}" for p, m in shared)
    log.warning(
        "durably: the %s %s can be read by other local users (%s); it holds prompts,"
        " tool outputs and any secrets steps were called with: run `chmod 600 %s`",
        what,
        path,
        modes,
        " ".join(shlex.quote(p) for p, _ in shared),
    )
