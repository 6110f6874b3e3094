"""Per-process state, reset in a forked child.

A child created by ``os.fork()`` gets a copy of every lock, connection and thread object
of its parent, but only the thread that forked. A lock another parent thread held at that
moment stays held forever in the child, a connection is shared with the parent (its
server session, its file locks), and a background thread object looks alive but never
runs. Every durably object holding such state registers here; right after a fork, in the
child, each gets its ``_after_fork_in_child()`` called, which must only swap in fresh
locks and forget inherited connections and threads (no I/O: the child opens its own on
first use).

An object may also define ``_before_fork()`` and ``_after_fork_in_parent()``: a store uses
them to make ``os.fork()`` wait until no thread is inside one of its calls (SQLite keeps
its file locks in process-wide state that a child would inherit held, so a child forked
inside a write transaction could never write). :class:`ForkGate` does that for code
without a lock of its own.

Objects are held weakly, so registering never keeps one alive. One ``os.register_at_fork``
hook serves them all (hooks cannot be unregistered, so one per object would leak).
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol


class ForkAware(Protocol):
    """An object with per-process state to reset in a forked child."""

    def _after_fork_in_child(self) -> None:
        """Replace locks, forget inherited connections and threads; do no I/O."""


_objects: weakref.WeakValueDictionary[int, ForkAware] = weakref.WeakValueDictionary()
_registry_lock = threading.Lock()


def reset_after_fork(obj: ForkAware) -> None:
    """Call ``obj._after_fork_in_child()`` in every child forked from now on."""
    with _registry_lock:
        _objects[id(obj)] = obj


def _hook(obj: Any, name: str) -> None:
    method = getattr(obj, name, None)
    if method is not None:
        method()


# The objects whose _before_fork ran, so the parent releases exactly those (the registry
# lock is not held meanwhile: a thread inside a section may register a new object).
_forking: list[Any] = []


def _before() -> None:
    with _registry_lock:
        objs = list(_objects.values())
    # Newest first, as os.register_at_fork orders its own "before" hooks.
    for obj in reversed(objs):
        _hook(obj, "_before_fork")
        _forking.append(obj)


def _after_in_parent() -> None:
    objs = _forking[:]
    _forking.clear()
    for obj in reversed(objs):
        _hook(obj, "_after_fork_in_parent")


def _after_in_child() -> None:
    global _registry_lock
    _registry_lock = threading.Lock()  # another thread may have held it at the fork
    _forking.clear()
    for obj in list(_objects.values()):
        obj._after_fork_in_child()


class ForkGate:
    """Makes ``os.fork()`` wait until no thread is inside a guarded section.

    Sections run concurrently with each other (``with gate.inside(): ...``); a fork waits
    for the running ones to end (other than the forking thread's own) and keeps new ones
    out until it is done, so a child never starts with a transaction of a thread it does
    not have.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._active = 0
        self._local = threading.local()
        reset_after_fork(self)

    @contextmanager
    def inside(self) -> Iterator[None]:
        """Run the block as a guarded section."""
        with self._cond:
            self._active += 1
        self._local.depth = getattr(self._local, "depth", 0) + 1
        try:
            yield
        finally:
            self._local.depth -= 1
            with self._cond:
                self._active -= 1
                if self._active == 0:
                    self._cond.notify_all()

    def _before_fork(self) -> None:
        self._cond.acquire()
        own = getattr(self._local, "depth", 0)  # the forking thread cannot wait for itself
        while self._active > own:
            self._cond.wait()

    def _after_fork_in_parent(self) -> None:
        self._cond.release()

    def _after_fork_in_child(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._active = getattr(self._local, "depth", 0)


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(
        before=_before, after_in_parent=_after_in_parent, after_in_child=_after_in_child
    )
