"""Restart to the first live step of a crashed 1,000-step run, against ``import durably``.

Prints, from one run on this machine (fresh interpreters, interleaved, medians):
- ``python -c pass`` (a bare interpreter start);
- ``python -c "import durably"``, and its ratio to the bare start (target <= 4x);
- a restart: a fresh interpreter that imports durably, opens the journal, claims the
  crashed run and replays its 999 recorded steps, timed from spawning it to its first live
  step, and its ratio to ``import durably`` (target <= 2x);
- the CPU time of each child (less disturbed than wall time by other programs' load); and,
  from inside the restarting child, what its parts cost: importing the engine
  (``durably.Engine``), opening the journal (``Engine(url)``), and ``engine.run`` up to
  the first live step (claim, load of the history, replay of 999 steps); and the modules
  it has imported by its first live step.

Bytecode is cached as in any deployment (a first start of each kind writes it and is not
counted; PYTHONDONTWRITEBYTECODE, set in some sandboxes, is removed from the children's
environment so the figures do not measure the compiler).

    python bench/restart.py [--steps N] [--rounds R] [--dir PATH] [--against SRC]

``--against SRC`` adds a column measured from another checkout's ``src/`` (e.g. a worktree
of main: ``git worktree add --detach /tmp/base main``), alternating with this one.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

HERE_SRC = Path(__file__).resolve().parents[1] / "src"

# One program, two lives: "crash" records the run and is SIGKILLed in its last step;
# "resume" is what a deployed program does after the crash (import, open the same
# journal, run the same workflow again) and prints, as JSON, the wall clock at its first
# live step (compared with the parent's clock before the spawn), the parts' times and,
# when asked ("modules"), the modules imported by then.
CHILD = textwrap.dedent(
    """
    import os, signal, sys, time
    url, n, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    t_import = time.perf_counter()
    import durably
    durably.Engine
    t_open = time.perf_counter()
    engine = durably.Engine(url)
    t_opened = time.perf_counter()
    first_live, mods = [], []
    def trivial(i):
        if mode == "crash" and i == n - 1:
            os.kill(os.getpid(), signal.SIGKILL)
        if not first_live:
            first_live.append((time.time(), time.perf_counter()))
            if mode == "modules":
                mods.extend(sys.modules)
        return {"i": i}
    @engine.workflow(name="resume")
    def many(ctx, steps):
        for i in range(steps):
            ctx.step("s", trivial, i)
        return steps
    t_run = time.perf_counter()
    engine.run(many, n, run_id="crashed")
    wall, perf = first_live[0]
    import json
    print(json.dumps({
        "first_live": wall,
        "engine_import": t_open - t_import,
        "open": t_opened - t_open,
        "replay": perf - t_run,
        "modules": sorted(mods),
    }))
    """
)


def child_env(src: Path) -> dict[str, str]:
    """The children's environment: cached bytecode allowed, ``src`` first on the path."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPATH"] = str(src)
    return env


def make_crashed(path: Path, steps: int, env: dict[str, str]) -> None:
    """Record a run SIGKILLed in its last step, folded into one file (no -wal)."""
    subprocess.run(
        [sys.executable, "-c", CHILD, f"sqlite:///{path}", str(steps), "crash"],
        check=False,
        env=env,
    )
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    (recorded,) = conn.execute("SELECT count(*) FROM steps").fetchone()
    conn.close()
    if recorded != steps - 1:
        sys.exit(f"the crashed run recorded {recorded} steps, not {steps - 1}: setup failed")


def fresh_copy(base: Path, scratch: Path) -> None:
    """``scratch``: the crashed journal as it was, mode 0600 as durably creates journals
    (a copy readable by others would log a warning and measure the logging import)."""
    for suffix in ("-wal", "-shm"):
        Path(f"{scratch}{suffix}").unlink(missing_ok=True)
    shutil.copyfile(base, scratch)
    os.chmod(scratch, 0o600)


def spawn(args: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """Wall seconds from spawn to exit, the child's CPU seconds, and its stdout."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(args, check=True, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, out.stdout


def resume(env: dict[str, str], base: Path, scratch: Path, steps: int, mode: str) -> Any:
    """One restart of the crashed run: (seconds to first live step, CPU, wall to exit,
    the child's report)."""
    fresh_copy(base, scratch)
    t0 = time.time()
    url = f"sqlite:///{scratch}"
    whole, cpu, out = spawn([sys.executable, "-c", CHILD, url, str(steps), mode], env)
    got = json.loads(out)
    return got["first_live"] - t0, cpu, whole, got


def one_round(env: dict[str, str], base: Path, scratch: Path, steps: int) -> dict[str, float]:
    """One measurement of each command for one checkout."""
    py = sys.executable
    bare, bare_cpu, _ = spawn([py, "-c", "pass"], env)
    imp, imp_cpu, _ = spawn([py, "-c", "import durably"], env)
    engine, engine_cpu, _ = spawn([py, "-c", "import durably; durably.Engine"], env)
    first_live, cpu, whole, got = resume(env, base, scratch, steps, "resume")
    return {
        "bare": bare,
        "bare_cpu": bare_cpu,
        "import": imp,
        "import_cpu": imp_cpu,
        "engine": engine,
        "engine_cpu": engine_cpu,
        "restart": first_live,
        "restart_cpu": cpu,
        "restart_exit": whole,
        "engine_import": got["engine_import"],
        "open": got["open"],
        "replay": got["replay"],
    }


ROWS = (
    ("bare", "python -c pass (ms)"),
    ("bare_cpu", "  CPU (ms)"),
    ("import", 'python -c "import durably" (ms)'),
    ("import_cpu", "  CPU (ms)"),
    ("engine", 'python -c "import durably; durably.Engine" (ms)'),
    ("engine_cpu", "  CPU (ms)"),
    ("restart", "restart to the first live step (ms)"),
    ("restart_cpu", "  CPU (ms), to the exit"),
    ("restart_exit", "restart, spawn to exit (the run finished) (ms)"),
    ("engine_import", "in the restart: durably.Engine imported (ms)"),
    ("open", "in the restart: Engine(url) (ms)"),
    ("replay", "in the restart: run to the first live step (ms)"),
)
RATIOS = (
    ("import", "bare", "import durably / bare start (target <= 4x)"),
    ("restart", "import", "restart / import durably (target <= 2x)"),
    ("restart_cpu", "import_cpu", "  the same in CPU time"),
    ("restart", "engine", 'restart / "import durably; durably.Engine"'),
)


def main() -> None:
    """Measure and print the figures and both ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000, help="steps of the run (default 1000)")
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds (default 15)")
    parser.add_argument("--dir", type=Path, default=None, help="where the journals go")
    parser.add_argument("--against", type=Path, default=None, help="src/ of a second checkout")
    args = parser.parse_args()
    if args.steps < 2 or args.rounds < 1:
        parser.error("--steps must be >= 2 and --rounds >= 1")
    sides = {"this": HERE_SRC}
    if args.against is not None:
        if not (args.against / "durably" / "__init__.py").is_file():
            parser.error(f"--against {args.against}: no durably/__init__.py there (give a src/)")
        sides = {"against": args.against.resolve(), **sides}
    envs = {name: child_env(src) for name, src in sides.items()}
    med = statistics.median
    got: dict[str, list[dict[str, float]]] = {name: [] for name in sides}
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        bases, scratch = {}, Path(d) / "restart.db"
        for name, env in envs.items():
            bases[name] = Path(d) / f"{name}-crashed.db"
            make_crashed(bases[name], args.steps, env)
            one_round(env, bases[name], scratch, args.steps)  # writes the bytecode
        for r in range(args.rounds):
            for name in list(sides) if r % 2 == 0 else list(reversed(sides)):
                got[name].append(one_round(envs[name], bases[name], scratch, args.steps))
        mods = {
            name: resume(envs[name], bases[name], scratch, args.steps, "modules")[3]["modules"]
            for name in sides
        }
    print(
        f"restart of a crashed {args.steps}-step run on SQLite, median of {args.rounds}"
        f" interleaved rounds, {os.cpu_count()} cores, load average"
        f" {os.getloadavg()[0]:.1f} at the end (other programs share the machine)"
    )
    names = list(sides)
    print(f"  {'':50}" + "".join(f"{n:>10}" for n in names))
    for key, label in ROWS:
        print(
            f"  {label:50}" + "".join(f"{med(x[key] for x in got[n]) * 1e3:10.1f}" for n in names)
        )
    for a, b, label in RATIOS:
        print(f"  {label:50}" + "".join(f"{med(x[a] / x[b] for x in got[n]):9.2f}x" for n in names))
    own = {n: sum(1 for m in mods[n] if m.split(".")[0] == "durably") for n in names}
    for label, count in (
        ("modules at the first live step: durably's", own),
        ("  all", {n: len(mods[n]) for n in names}),
    ):
        print(f"  {label:50}" + "".join(f"{count[n]:10}" for n in names))


if __name__ == "__main__":
    main()
