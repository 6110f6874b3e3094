"""Helpers for fork-safety tests: run code in a real forked child, and hold a thread
inside a store call at the moment of the fork."""

from __future__ import annotations

import os
import signal
import threading
import time
import traceback
from collections.abc import Callable

import pytest

from durably.clock import FakeClock

CHILD_TIMEOUT_S = 60.0


def run_in_child(
    fn: Callable[[], None],
    *,
    after_fork: Callable[[], None] | None = None,
    timeout_s: float = CHILD_TIMEOUT_S,
) -> None:
    """Fork; run ``fn`` in the child; fail with its traceback, or when it hangs.

    ``after_fork`` runs in the parent right after the fork (e.g. to let a parent thread
    that was held inside a store call go on). A child still running after ``timeout_s``
    is killed and the test fails: a lock inherited from the parent never gets released.
    """
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report through the pipe and the exit code only
        os.close(read_end)
        code = 1
        try:
            fn()
            code = 0
        except BaseException:
            os.write(write_end, traceback.format_exc()[-8000:].encode())
        finally:
            os._exit(code)
    os.close(write_end)
    try:
        if after_fork is not None:
            after_fork()
        status = _wait(pid, timeout_s)
        with os.fdopen(read_end, "rb") as pipe:
            report = pipe.read().decode(errors="replace")
    except BaseException:
        _kill(pid)
        raise
    assert os.waitstatus_to_exitcode(status) == 0, f"the forked child failed:\n{report}"


def _wait(pid: int, timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        if time.monotonic() > deadline:
            _kill(pid)
            pytest.fail(
                f"the forked child was still running after {timeout_s:g} s: it is stuck,"
                " most likely on a lock a parent thread held at the fork"
            )
        time.sleep(0.01)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass


class GateClock(FakeClock):
    """A fake clock whose ``time()`` can trap one thread until released.

    Stores read the clock inside their transactions, so a trapped thread sits inside a
    store call, holding whatever that call holds, for as long as the test wants.
    """

    def __init__(self) -> None:
        super().__init__()
        self._trap: str | None = None
        self.inside = threading.Event()
        self.go_on = threading.Event()

    def time(self) -> float:
        """The fake time; the trapped thread waits here first."""
        if self._trap is not None and threading.current_thread().name == self._trap:
            self._trap = None
            self.inside.set()
            self.go_on.wait(CHILD_TIMEOUT_S)
        return super().time()

    def hold_inside(self, call: Callable[[], object]) -> threading.Thread:
        """Start ``call`` in a thread and return once it is waiting inside the clock."""
        name = f"held-{id(call)}"
        self._trap = name
        thread = threading.Thread(target=call, name=name, daemon=True)
        thread.start()
        assert self.inside.wait(CHILD_TIMEOUT_S), "the thread never reached the clock"
        return thread

    def release(self) -> None:
        """Let the trapped thread go on."""
        self.go_on.set()
