"""Forked children for crash tests: a real process per attempt, started from a warm parent.

Forking skips interpreter start-up and imports, which is what makes 120 real process
deaths fit in seconds. Rules a child follows: it opens its own databases after the fork
(a SQLite connection must never cross a fork), it never returns into the parent's code
(``os._exit``), and a Python error is written to a file the parent reads, since a child's
stderr may be captured or closed.
"""

from __future__ import annotations

import os
import select
import signal
import time
import traceback
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

EXIT_OK = 0
EXIT_ERROR = 70  # an exception escaped the child's function
EXIT_NOT_KILLED = 71  # the child finished although a kill was planned
POLL_S = 0.001


@dataclass(frozen=True)
class Exit:
    """How a child ended: killed by a signal, or exited with a code."""

    pid: int
    signal: int | None
    code: int | None

    @property
    def sigkilled(self) -> bool:
        """True when SIGKILL ended the child: a real process death."""
        return self.signal == signal.SIGKILL


def spawn(fn: Callable[[], int], error_file: Path) -> int:
    """Fork a child that runs ``fn`` and exits with its return code; return the pid."""
    pid = os.fork()
    if pid != 0:
        return pid
    code = EXIT_ERROR
    try:
        code = fn()
    except BaseException:
        error_file.write_text(traceback.format_exc())
    os._exit(code)  # never run the parent's cleanup (pytest, atexit, buffered output)


def wait_any(pids: Collection[int]) -> Exit:
    """Reap the next of ``pids`` to end, blocking until one does.

    Only the listed children are reaped: ``waitpid(-1)`` would also take children that
    other code in this process (a test's server fixture) is waiting for.
    """
    while True:
        for pid in pids:
            got, status = os.waitpid(pid, os.WNOHANG)
            if got:
                if os.WIFSIGNALED(status):
                    return Exit(pid, os.WTERMSIG(status), None)
                return Exit(pid, None, os.waitstatus_to_exitcode(status))
        _block_until_exit(pids)


def _block_until_exit(pids: Collection[int]) -> None:
    """Sleep until one of ``pids`` may have exited: on a pidfd where the OS has one,
    else for a moment."""
    if not hasattr(os, "pidfd_open"):
        time.sleep(POLL_S)
        return
    fds = []
    try:
        for pid in pids:
            try:
                fds.append(os.pidfd_open(pid))
            except ProcessLookupError:
                return  # already gone: reap it now
        select.select(fds, [], [], POLL_S * 100)
    finally:
        for fd in fds:
            os.close(fd)


def die_now() -> None:
    """End this process the hard way: no cleanup, no flush, no atexit handlers."""
    os.kill(os.getpid(), signal.SIGKILL)


def child_error(error_file: Path, ex: Exit) -> str:
    """What went wrong in a child, for an error message."""
    if error_file.exists():
        return error_file.read_text().strip().splitlines()[-1]
    if ex.signal is not None:
        return f"killed by signal {ex.signal}"
    return f"exit code {ex.code}"
