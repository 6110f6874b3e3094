"""A store wrapper that makes recording calls fail, for tests of the failure domains.

``FlakyStore(inner)`` delegates everything to ``inner``; ``claim``, ``append``, ``finish``
and ``release`` first consult a plan: scripted failures (``fail(method, times, kind)``) or
random ones (``rate``), each raised *before* the real call (nothing written) or *after* it
(written, but the caller is told it failed: a commit whose outcome is unknown, as when a
connection drops during COMMIT). The errors are the ones the real stores raise.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from typing import Any

from durably import errors
from durably.errors import StoreBusy, StoreError

# getattr: the same wrapper runs against older durably to show a test failing there.
StoreUnavailable = getattr(errors, "StoreUnavailable", StoreError)
StoreDiskFull = getattr(errors, "StoreDiskFull", StoreError)

KINDS = {
    "busy": lambda: StoreBusy("injected: the journal stayed locked past the busy timeout"),
    "dropped": lambda: StoreUnavailable("injected: the server closed the connection"),
    "full": lambda: StoreDiskFull("injected: the disk is full"),
    "corrupt": lambda: StoreError("injected: a permanent store error"),
}
FAULTY = ("claim", "append", "finish", "release")
# Random failures (``rate``) hit the recording calls only: the crash tests' seeds were
# chosen with those, and a claim's failures are scripted (``fail("claim", ...)``).
RANDOM_FAULTY = ("append", "finish", "release")


class FlakyStore:
    """Wraps a Store; see the module docstring."""

    def __init__(
        self, inner: Any, *, rate: float = 0.0, seed: int = 0, log: str | None = None
    ) -> None:
        self.inner = inner
        self.log = log  # a file each injected failure is appended to (survives SIGKILL)
        self.rate = rate
        self.rng = random.Random(seed)
        self.script: dict[str, list[tuple[str, bool]]] = {}
        self.injected: Counter[str] = Counter()
        self.lock = threading.Lock()

    def fail(self, method: str, times: int, kind: str = "busy", after: bool = False) -> None:
        """Make the next ``times`` calls of ``method`` fail with ``kind``."""
        with self.lock:
            self.script.setdefault(method, []).extend([(kind, after)] * times)

    def heal(self) -> None:
        """Stop every scripted and random failure."""
        with self.lock:
            self.script.clear()
            self.rate = 0.0

    def _plan(self, method: str) -> tuple[str, bool] | None:
        with self.lock:
            queued = self.script.get(method)
            if queued:
                return queued.pop(0)
            if method in RANDOM_FAULTY and self.rate and self.rng.random() < self.rate:
                kind = self.rng.choice(["busy", "dropped", "full"])
                return kind, self.rng.random() < 0.5
        return None

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        plan = self._plan(method)
        if plan is None:
            return getattr(self.inner, method)(*args, **kwargs)
        kind, after = plan
        self.injected[f"{method}:{kind}"] += 1
        if self.log is not None:
            with open(self.log, "a") as f:
                f.write(f"{method} {kind} {'after' if after else 'before'}\n")
        if after:
            getattr(self.inner, method)(*args, **kwargs)
        raise KINDS[kind]()

    def claim(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("claim", *args, **kwargs)

    def append(self, *args: Any, **kwargs: Any) -> bool:
        """The inner append's result: whether a cancel was asked for the run."""
        return bool(self._call("append", *args, **kwargs))

    def finish(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("finish", *args, **kwargs)

    def release(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("release", *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
