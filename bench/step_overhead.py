"""Per-step overhead of the SQLite journal against a raw fsync'd commit, and resume time.

Prints, from one run on the same disk:
- per-step time of a 1,000-step workflow with a trivial step vs a raw sqlite3
  INSERT+COMMIT with the same pragmas (WAL, synchronous=FULL), and their ratio
  (target <= 1.5);
- replay time per recorded step (target <= 20 us);
- time from starting a fresh interpreter that runs ``engine.run`` on a crashed
  1,000-step run to its first live step, including ``import durably`` (target <= 100 ms).

Reference (measured here, issue text): DBOS 3.4.0 takes 2.7 ms/step on SQLite against a
0.25 ms raw commit, and 1.8 s from restart to the first live step of a 1,000-step run.

Run: ``python bench/step_overhead.py [--steps N] [--dir PATH]``.

``--against SRC`` compares two checkouts side by side in one run: each round measures
the live, effect and replayed (sync and async) step of the ``src/`` directory given
(before, e.g. a worktree of main) and of this checkout (after), each in a fresh
interpreter, alternating, and prints both medians and their ratio.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import durably


def raw_commit_s(path: Path, n: int) -> float:
    """Mean seconds of one INSERT+COMMIT with durably's pragmas."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute(
        "CREATE TABLE t (run_id TEXT, seq INTEGER, output TEXT, PRIMARY KEY (run_id, seq))"
    )
    t0 = time.perf_counter()
    for i in range(n):
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO t VALUES (?, ?, ?)", ("r", i, '{"i":1}'))
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - t0
    conn.close()
    return elapsed / n


def trivial(i: int) -> dict[str, int]:
    """The benchmark's step: does nothing but return a small dict."""
    return {"i": i}


@durably.step(effect=True)
def trivial_effect(i: int, *, idempotency_key: str) -> dict[str, int]:
    """The effect variant: an intent is recorded before it runs."""
    return {"i": i}


def effect_step_s(path: Path, n: int) -> float:
    """Mean seconds per live ``effect=True`` step (intent write + result write)."""
    engine = durably.Engine(f"sqlite:///{path}")

    @engine.workflow(name="bench-effect")
    def many(ctx: durably.Context, steps: int) -> int:
        for i in range(steps):
            ctx.step("e", trivial_effect, i)
        return steps

    t0 = time.perf_counter()
    engine.run(many, n, run_id="effects")
    elapsed = (time.perf_counter() - t0) / n
    engine.close()
    return elapsed


def durably_step_s(path: Path, n: int) -> tuple[float, float, float, float]:
    """Mean seconds per live step and per replayed step of an n-step workflow, each by
    the wall clock and in CPU time of this process (less disturbed by other work on a
    shared machine, and blind to fsync waits): live, replay, live CPU, replay CPU."""
    engine = durably.Engine(f"sqlite:///{path}")

    @engine.workflow(name="bench")
    def many(ctx: durably.Context, steps: int) -> int:
        for i in range(steps):
            ctx.step("s", trivial, i)
        return steps

    t0, c0 = time.perf_counter(), time.process_time()
    engine.run(many, n, run_id="live")
    live, live_cpu = (time.perf_counter() - t0) / n, (time.process_time() - c0) / n
    # Replay: mark the run unfinished again by copying its history into a new run
    # through the public path: a run that crashed just before finishing.
    engine.store._conn.execute(  # type: ignore[attr-defined]
        "UPDATE runs SET status='running', outcome=NULL, finished_at=NULL WHERE run_id='live'"
    )
    t0, c0 = time.perf_counter(), time.process_time()
    engine.run(many, n, run_id="live")
    replay, cpu = (time.perf_counter() - t0) / n, (time.process_time() - c0) / n
    engine.close()
    return live, replay, live_cpu, cpu


def async_replay_s(path: Path, n: int) -> tuple[float, float]:
    """Mean seconds per replayed step of an n-step ``async def`` workflow (the replay of
    an async workflow goes through the async driver and the awaitable ``ctx.step``):
    wall clock and CPU time."""
    engine = durably.Engine(f"sqlite:///{path}")

    @engine.workflow(name="bench-async")
    async def many(ctx: durably.AsyncContext, steps: int) -> int:
        for i in range(steps):
            await ctx.step("s", trivial, i)
        return steps

    engine.run(many, n, run_id="live")
    engine.store._conn.execute(  # type: ignore[attr-defined]
        "UPDATE runs SET status='running', outcome=NULL, finished_at=NULL WHERE run_id='live'"
    )
    t0, c0 = time.perf_counter(), time.process_time()
    engine.run(many, n, run_id="live")
    replay, cpu = (time.perf_counter() - t0) / n, (time.process_time() - c0) / n
    engine.close()
    return replay, cpu


RESUME_SCRIPT = textwrap.dedent(
    """
    import sys, time
    t_start = float(sys.argv[2])
    import durably
    engine = durably.Engine(sys.argv[1])
    first_live = []
    def trivial(i):
        if not first_live:
            first_live.append(time.time())
        return {"i": i}
    @engine.workflow(name="resume")
    def many(ctx, steps):
        for i in range(steps):
            ctx.step("s", trivial, i)
        return steps
    engine.run(many, int(sys.argv[3]), run_id="crashed")
    print(first_live[0] - t_start)
    """
)


def _child_env() -> dict[str, str]:
    # A deployed program runs from cached bytecode; PYTHONDONTWRITEBYTECODE (set in some
    # sandboxes) would make every start recompile durably and measure the compiler.
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def resume_s(path: Path, n: int, repeats: int = 6) -> float:
    """Median seconds from spawning a fresh interpreter to the first live step of a
    crashed n-step run (history of n-1 recorded steps). Bytecode is cached, as in any
    deployment; the first start (which writes it) is not counted."""
    url = f"sqlite:///{path}"
    setup = textwrap.dedent(
        f"""
        import os, signal, durably
        engine = durably.Engine({url!r})
        def trivial(i):
            if i == {n - 1}:
                os.kill(os.getpid(), signal.SIGKILL)
            return {{"i": i}}
        @engine.workflow(name="resume")
        def many(ctx, steps):
            for i in range(steps):
                ctx.step("s", trivial, i)
            return steps
        engine.run(many, {n}, run_id="crashed")
        """
    )
    results = []
    for _ in range(repeats):
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        subprocess.run([sys.executable, "-c", setup], check=False, env=_child_env())
        t0 = time.time()
        out = subprocess.run(
            [sys.executable, "-c", RESUME_SCRIPT, url, repr(t0), str(n)],
            check=True,
            capture_output=True,
            text=True,
            env=_child_env(),
        )
        results.append(float(out.stdout.strip()))
    return statistics.median(results[1:])


def python_startup_s(repeats: int = 5) -> float:
    """Median seconds to start a bare interpreter (for context beside resume time)."""
    results = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True, env=_child_env())
        results.append(time.perf_counter() - t0)
    return statistics.median(results)


def one_round(base: Path, steps: int) -> dict[str, float]:
    """One round of the per-step figures (``--one``: printed as JSON for ``--against``)."""
    live, replay, live_cpu, replay_cpu = durably_step_s(base / "journal.db", steps)
    async_replay, async_cpu = async_replay_s(base / "async.db", steps)
    return {
        "raw": raw_commit_s(base / "raw.db", steps),
        "live": live,
        "live_cpu": live_cpu,
        "effect": effect_step_s(base / "effects.db", steps),
        "replay": replay,
        "replay_cpu": replay_cpu,
        "async_replay": async_replay,
        "async_replay_cpu": async_cpu,
    }


def compare(against: Path, steps: int, rounds: int, where: Path | None) -> None:
    """Before (``against``, a ``src/`` directory) and after (this checkout), side by side:
    alternating fresh interpreters, so drifting disk latency and load hit both alike."""
    import json

    here = Path(__file__).resolve().parents[1] / "src"
    sides = {"before": against.resolve(), "after": here}
    got: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    for r in range(rounds):
        order = ["before", "after"] if r % 2 == 0 else ["after", "before"]
        for side in order:
            with tempfile.TemporaryDirectory(dir=where) as d:
                env = {**_child_env(), "PYTHONPATH": str(sides[side])}
                out = subprocess.run(
                    [sys.executable, __file__, "--one", "--steps", str(steps), "--dir", d],
                    check=True,
                    capture_output=True,
                    text=True,
                    env=env,
                )
                got[side].append(json.loads(out.stdout))
    med = statistics.median
    print(
        f"before: {sides['before']}\nafter:  {sides['after']}\n{steps} steps, median of"
        f" {rounds} alternating rounds, {os.cpu_count()} cores"
    )
    print(f"  {'':32} {'before':>10} {'after':>10} {'after/before':>13}")
    for key, unit, scale in (
        ("raw", "ms", 1e3),
        ("live", "ms", 1e3),
        ("live_cpu", "us", 1e6),
        ("effect", "ms", 1e3),
        ("replay", "us", 1e6),
        ("replay_cpu", "us", 1e6),
        ("async_replay", "us", 1e6),
        ("async_replay_cpu", "us", 1e6),
    ):
        b = med(x[key] for x in got["before"])
        a = med(x[key] for x in got["after"])
        label = {
            "raw": "raw sqlite3 commit",
            "live": "live step",
            "live_cpu": "live step, CPU",
            "effect": "effect step",
            "replay": "replayed step",
            "replay_cpu": "replayed step, CPU",
            "async_replay": "replayed step (async)",
            "async_replay_cpu": "replayed step (async), CPU",
        }[key]
        name = f"{label} ({unit})"
        print(f"  {name:32} {b * scale:10.3f} {a * scale:10.3f} {a / b:12.2f}x")


def main() -> None:
    """Run the benchmark and print the figures (medians over interleaved rounds, since an
    fsync's latency on a shared disk drifts from one second to the next)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=None, help="where the databases go")
    parser.add_argument("--against", type=Path, default=None, help="src/ of the 'before'")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        import json

        print(json.dumps(one_round(args.dir or Path(tempfile.mkdtemp()), args.steps)))
        return
    if args.against is not None:
        compare(args.against, args.steps, args.rounds, args.dir)
        return
    raws, lives, replays, effects, ratios = [], [], [], [], []
    async_replays = []
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        base = Path(d)
        for r in range(args.rounds):
            raw = raw_commit_s(base / f"raw{r}.db", args.steps)
            live, replay, _, _ = durably_step_s(base / f"journal{r}.db", args.steps)
            effects.append(effect_step_s(base / f"effects{r}.db", args.steps))
            async_replays.append(async_replay_s(base / f"async{r}.db", args.steps)[0])
            raws.append(raw)
            lives.append(live)
            replays.append(replay)
            ratios.append(live / raw)
        resume = resume_s(base / "resume.db", args.steps)
        bare = python_startup_s()
    med = statistics.median
    print(
        f"durably step overhead on SQLite (WAL, synchronous=FULL), {args.steps} steps,"
        f" median of {args.rounds} interleaved rounds, {os.cpu_count()} cores"
    )
    print(f"  raw sqlite3 INSERT+COMMIT        {med(raws) * 1e3:8.3f} ms")
    print(
        f"  durably live step                {med(lives) * 1e3:8.3f} ms   ratio"
        f" {med(ratios):.2f}x (rounds: {', '.join(f'{x:.2f}' for x in ratios)}; target"
        " <= 1.5x; DBOS 3.4.0: 2.7 / 0.25 = 10.8x)"
    )
    print(
        f"  durably effect step (intent+result) {med(effects) * 1e3:5.3f} ms   the intent"
        f" write costs {(med(effects) - med(lives)) * 1e3:.3f} ms per effect step"
    )
    print(f"  durably replayed step            {med(replays) * 1e6:8.1f} us   (target <= 20 us)")
    print(f"  durably replayed step (async)    {med(async_replays) * 1e6:8.1f} us")
    print(
        f"  restart to first live step       {resume * 1e3:8.1f} ms   (target <= 100 ms incl."
        f" interpreter start {bare * 1e3:.0f} ms and import; DBOS 3.4.0: 1,800 ms)"
    )


if __name__ == "__main__":
    main()
