"""``durably bench commit``: how long one durable journal commit takes on this disk.

Four ways of committing one small record, each timed ``samples`` times in a scratch
folder on the disk under test:

* ``durably step (FULL)``: the real engine appending one step result
  (``synchronous=FULL`` in WAL, and ``fullfsync`` on macOS); timed inside the engine
  between the step's "effect" and "recorded" fault-hook windows, so it is exactly the
  journal write;
* ``sqlite FULL``: one ``INSERT`` transaction, WAL, ``synchronous=FULL`` (+ fullfsync on
  macOS);
* ``sqlite NORMAL``: the same with ``synchronous=NORMAL`` (no fsync per commit: survives a
  process crash, not power loss);
* ``append+fdatasync``: a raw baseline, 64 bytes appended to a file and flushed to the
  device (``F_FULLFSYNC`` on macOS).

A commit that reaches stable storage costs at least tens of microseconds even on fast
NVMe; anything faster for an fsync'ing method means a volatile write cache or a RAM disk
is answering, and the figure is flagged.
"""

from __future__ import annotations

import os
import sqlite3
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

SEED_REFERENCE = "3.02 ms median, 4.78 ms p99: durable SQLite commit, Apple M3, fullfsync"
SEED_NO_FULLFSYNC = "0.04 ms on the same laptop without fullfsync (stops at the drive cache)"
TOO_FAST_MS = 0.05
SAMPLES_MAX = 100_000
MACOS = sys.platform == "darwin"


@dataclass(frozen=True)
class CommitFigure:
    """Latency of one commit method, in milliseconds."""

    method: str
    median_ms: float
    p99_ms: float
    samples: int
    fsyncs: bool

    @property
    def suspicious(self) -> bool:
        """True when an fsync'ing method is too fast to have reached stable storage."""
        return self.fsyncs and self.median_ms < TOO_FAST_MS


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank ``q`` percentile (0 < q <= 100) of ``values``."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


def _figure(method: str, secs: list[float], fsyncs: bool) -> CommitFigure:
    ms = [s * 1000 for s in secs]
    return CommitFigure(method, statistics.median(ms), percentile(ms, 99), len(ms), fsyncs)


def bench_sqlite(folder: Path, synchronous: str, samples: int) -> CommitFigure:
    """Time ``samples`` one-row transactions on a fresh WAL database."""
    db = sqlite3.connect(folder / f"bench-{synchronous}.db", isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode = WAL")
        db.execute(f"PRAGMA synchronous = {synchronous}")
        if MACOS:
            db.execute("PRAGMA fullfsync = ON")  # plain fsync stops at the drive's cache
        db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, payload TEXT)")
        payload = "x" * 200
        secs = []
        for _ in range(samples):
            t0 = time.perf_counter()
            db.execute("BEGIN IMMEDIATE")
            db.execute("INSERT INTO t (payload) VALUES (?)", (payload,))
            db.execute("COMMIT")
            secs.append(time.perf_counter() - t0)
    finally:
        db.close()
    label = f"sqlite {synchronous}" + (" + fullfsync" if MACOS else "")
    return _figure(label, secs, synchronous == "FULL")


def bench_fdatasync(folder: Path, samples: int) -> CommitFigure:
    """Time ``samples`` appends of 64 bytes, each flushed to the device."""
    fd = os.open(folder / "bench-append.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    record = b"r" * 63 + b"\n"
    secs = []
    try:
        for _ in range(samples):
            t0 = time.perf_counter()
            os.write(fd, record)
            _flush(fd)
            secs.append(time.perf_counter() - t0)
    finally:
        os.close(fd)
    return _figure("append+F_FULLFSYNC" if MACOS else "append+fdatasync", secs, True)


def _flush(fd: int) -> None:
    if MACOS:
        import fcntl

        fcntl.fcntl(fd, fcntl.F_FULLFSYNC)  # type: ignore[attr-defined,unused-ignore]
    else:
        os.fdatasync(fd)


def bench_engine(folder: Path, samples: int) -> CommitFigure:
    """Time the real engine's journal write of one step result, ``samples`` times."""
    import durably

    marks: dict[str, float] = {}
    secs: list[float] = []

    def hook(run_id: str, position: str, name: str, window: str) -> None:
        if window == "effect":
            marks[position] = time.perf_counter()
        elif window == "recorded":
            secs.append(time.perf_counter() - marks.pop(position))

    def noop(i: int) -> int:
        return i

    with durably.Engine(f"sqlite:///{folder / 'bench-engine.db'}", fault_hook=hook) as eng:

        @eng.workflow(name="bench-commit")
        def wf(ctx: durably.Context, n: int) -> int:
            for i in range(n):
                ctx.step("noop", noop, i)
            return n

        eng.run(wf, samples, run_id="bench")
    return _figure("durably step (FULL)", secs, True)


def run_bench(samples: int, folder: Path | None = None) -> list[CommitFigure]:
    """All four figures, measured in a scratch folder under ``folder`` (default: temp)."""
    if not 1 <= samples <= SAMPLES_MAX:
        raise ValueError(f"samples={samples}: choose 1..{SAMPLES_MAX}")
    with tempfile.TemporaryDirectory(prefix="durably-bench-", dir=folder) as tmp:
        where = Path(tmp)
        return [
            bench_engine(where, samples),
            bench_sqlite(where, "FULL", samples),
            bench_sqlite(where, "NORMAL", samples),
            bench_fdatasync(where, samples),
        ]
