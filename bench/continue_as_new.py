"""A 10,000-iteration mailbox loop that continues as new every 100 iterations: the time
from a restart to its first live step stays flat however long the run has lived, and its
live history stays bounded.

``python bench/continue_as_new.py [--iterations 10000] [--every 100] [--repeat 7]``

The loop handles one message per iteration (a recorded step) and calls
``ctx.continue_as_new(next_item, summary)`` every ``--every`` iterations. The run is
stopped (a KeyboardInterrupt from the fault hook: the run is given back untouched, as a
crash leaves it) half-way into the generation after iteration ``--every`` and half-way
into the one before iteration ``--iterations``; each restart (a fresh Engine on the same
journal, ``engine.run``) is timed to the hook's call for its first live step. Both
restarts replay the same number of records (one generation's half), whatever came
before: the ratio late/early is printed (target <= 1.2), with a run without
continue_as_new stopped at the same late iteration as the contrast. Figures are medians
of ``--repeat`` restarts; other work on the machine moves them (say so next to them).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import durably


class Stop(KeyboardInterrupt):
    """Stops the driving process at a chosen step (the run is given back untouched)."""


def handle(item: int) -> int:
    return item % 7


def _engine(url: str, stop_at: int | None, marks: list[float]) -> tuple[durably.Engine, Any]:
    def hook(run_id: str, pos: str, name: str, window: str) -> None:
        if window == "before" and name == f"m{stop_at}":
            marks.append(time.perf_counter())
            raise Stop

    # max_starts: every timed restart stops at the same step (as a crash loop would).
    engine = durably.Engine(url, fault_hook=hook, durability="process", max_starts=10**6)

    @engine.workflow(name="mailbox")
    def mailbox(ctx: durably.Context, item: int, total: int, every: int, acc: int) -> int:
        for _ in range(every):
            if item == total:
                return acc
            acc += ctx.step(f"m{item}", handle, item)
            item += 1
        return ctx.continue_as_new(item, total, every, acc)

    @engine.workflow(name="uncapped")
    def uncapped(ctx: durably.Context, total: int) -> int:
        acc = 0
        for item in range(total):
            acc += ctx.step(f"m{item}", handle, item)
        return acc

    return engine, {"mailbox": mailbox, "uncapped": uncapped}


def _restart(url: str, wf: str, args: tuple[Any, ...], run_id: str, stop_at: int) -> float:
    """Seconds from a fresh engine's ``run`` call to its first live step (``stop_at``):
    the first call also builds the run up to there."""
    marks: list[float] = []
    engine, flows = _engine(url, stop_at, marks)
    began = time.perf_counter()
    try:
        engine.run(flows[wf], *args, run_id=run_id)
    except Stop:
        pass
    engine.close()
    return marks[-1] - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=10_000)
    parser.add_argument("--every", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=7)
    opts = parser.parse_args()
    total, every = opts.iterations, opts.every
    early, late = every + every // 2, total - every // 2
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'journal.db'}"
        args = (0, total, every, 0)
        _restart(url, "mailbox", args, "early", early)
        _restart(url, "mailbox", args, "late", late)
        _restart(url, "uncapped", (total,), "uncapped", late)
        early_s, late_s, uncapped_s = [], [], []
        for _ in range(opts.repeat):  # interleaved: drift hits all alike
            early_s.append(_restart(url, "mailbox", args, "early", early))
            late_s.append(_restart(url, "mailbox", args, "late", late))
            uncapped_s.append(_restart(url, "uncapped", (total,), "uncapped", late))
        engine = durably.Engine(url)
        gens = engine.store.list_generations("late")
        run = engine.store.get_run("late")
        assert run is not None
        live = len(engine.history("late"))
        engine.close()
    e, la, u = (statistics.median(x) * 1000 for x in (early_s, late_s, uncapped_s))
    print(f"restart to first live step at iteration {early:,}: {e:.2f} ms")
    print(f"restart to first live step at iteration {late:,}: {la:.2f} ms")
    print(f"ratio late/early: {la / e:.2f} (target <= 1.2)")
    print(f"without continue_as_new, restart at iteration {late:,}: {u:.2f} ms ({u / e:.1f}x)")
    print(
        f"live history: {live} records in generation {run.generation}; the largest"
        f" generation held {max(g.records for g in gens)} records over {len(gens)} finished"
    )


if __name__ == "__main__":
    main()
