"""``python -m durably.chaos.dst --seed N --steps S [--workers W]``: run simulations.

Prints each seed's simulated steps and outcomes; on a violation, the seed, the smallest
configuration found that still breaks the same invariant, its command line, and its
trace (the violating run's actions, then the last actions of every process); exits 1.
The same seed prints the same lines (timings aside, on their own ``time:`` line).
"""

from __future__ import annotations

import argparse
import sys

from .sim import KINDS, Config, shrink, simulate
from .workloads import CATALOG

TRACE_TAIL = 60


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m durably.chaos.dst",
        description="Deterministic simulation of durably's protocol: seeded interleavings of"
        " simulated workers and callers on one real SQLite journal, with injected faults;"
        " invariants checked after every scheduled action.",
    )
    p.add_argument("--seed", type=int, default=0, help="the first seed (default 0)")
    p.add_argument("--seeds", type=int, default=1, help="how many seeds from --seed (default 1)")
    p.add_argument(
        "--steps", type=int, default=2000, help="simulated steps per seed (default 2000)"
    )
    p.add_argument("--workers", type=int, default=3, help="simulated worker processes (default 3)")
    p.add_argument("--callers", type=int, default=2, help="outside callers, 1..8 (default 2)")
    p.add_argument(
        "--faults",
        default=",".join(KINDS),
        help="kinds of fault to inject, comma-separated, or 'none' (default all:"
        f" {','.join(KINDS)})",
    )
    p.add_argument(
        "--workloads",
        default=",".join(w.name for w in CATALOG),
        help="workloads to run, comma-separated (default all:"
        f" {','.join(w.name for w in CATALOG)})",
    )
    p.add_argument("--no-shrink", action="store_true", help="report a failure without shrinking it")
    return p


def _words(
    text: str, known: tuple[str, ...], what: str, p: argparse.ArgumentParser
) -> tuple[str, ...]:
    if text == "none":
        return ()
    words = tuple(w for w in text.split(",") if w)
    bad = [w for w in words if w not in known]
    if bad:
        p.error(f"unknown {what} {', '.join(bad)}: choose from {', '.join(known)}")
    return words


def main(argv: list[str] | None = None) -> int:
    """Run the simulations the arguments ask for; 0 when no invariant broke, 1 otherwise."""
    p = _parser()
    a = p.parse_args(argv)
    if a.steps < 1 or a.seeds < 1 or not 1 <= a.workers <= 32 or not 1 <= a.callers <= 8:
        # (No caller starts no run: a simulation without callers would never end.)
        p.error("--steps and --seeds must be >= 1, --workers 1..32, --callers 1..8")
    faults = _words(a.faults, KINDS, "fault kind", p)
    workloads = _words(a.workloads, tuple(w.name for w in CATALOG), "workload", p)
    if not workloads:
        p.error("--workloads: name at least one")
    total = 0
    wall = 0.0
    for seed in range(a.seed, a.seed + a.seeds):
        cfg = Config(
            seed=seed,
            steps=a.steps,
            workers=a.workers,
            callers=a.callers,
            faults=faults,
            workloads=workloads,
        )
        rep = simulate(cfg)
        total += rep.steps
        wall += rep.wall_s
        print(rep.summary())
        if rep.violations:
            if not a.no_shrink:
                cfg, rep = shrink(cfg, rep)
                print(f"shrunk to: {cfg.command()}")
                print(rep.summary())
            v = rep.violations[0]
            mine = [ln for ln in rep.trace if f"({v.run_id})" in ln or f" {v.run_id}@" in ln]
            print(f"trace of run {v.run_id} (last {TRACE_TAIL} of its {len(mine)} actions):")
            for line in mine[-TRACE_TAIL:]:
                print("  " + line)
            print(f"the last {TRACE_TAIL // 4} actions of all processes before it:")
            for line in rep.trace[-(TRACE_TAIL // 4) :]:
                print("  " + line)
            print(f"FAILED at seed {seed}: replay with {cfg.command()}")
            return 1
    print(f"total: {total} simulated steps over {a.seeds} seed(s), no violation")
    print(f"time: {wall:.1f} s ({total / wall if wall else 0:.0f} steps/s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
