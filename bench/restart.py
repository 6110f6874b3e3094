"""Restart to the first live step of a crashed 1,000-step run, against ``import durably``.

Prints, from one run on this machine (fresh interpreters, interleaved, medians):
- ``python -c pass`` (a bare interpreter start);
- ``python -c "import durably"``, and its ratio to the bare start (target <= 4x);
- a restart: a fresh interpreter that imports durably, opens the journal, claims the
  crashed run and replays its 999 recorded steps, timed from spawning it to its first live
  step, and its ratio to ``import durably`` (target <= 2x);
- the CPU time of each child (less disturbed by other programs' load than wall time), the
  modules a resume has imported at its first live step, and, in-process, what the replay of
  the 999 steps costs once everything is imported (the part of the restart that is not
  start-up).

Bytecode is cached as in any deployment (the first start of each kind writes it and is not
counted; PYTHONDONTWRITEBYTECODE, set in some sandboxes, is removed from the children's
environment so the figures do not measure the compiler).

Run: ``python bench/restart.py [--steps N] [--rounds R] [--dir PATH] [--against SRC]``.
``--against SRC`` adds a second column measured from another checkout's ``src/`` (e.g. a
worktree of main), alternating with this one in the same rounds.
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
from collections.abc import Callable
from pathlib import Path

HERE_SRC = Path(__file__).resolve().parents[1] / "src"

CRASH_SCRIPT = textwrap.dedent(
    """
    import os, signal, sys, durably
    engine = durably.Engine(sys.argv[1])
    n = int(sys.argv[2])
    def trivial(i):
        if i == n - 1:
            os.kill(os.getpid(), signal.SIGKILL)
        return {"i": i}
    @engine.workflow(name="resume")
    def many(ctx, steps):
        for i in range(steps):
            ctx.step("s", trivial, i)
        return steps
    engine.run(many, n, run_id="crashed")
    """
)

# What a deployed program does after a crash: import, open the same journal, run the same
# workflow again. It prints the wall clock at its first live step (compared with the
# parent's clock before the spawn) and, on request, the modules imported by then.
RESUME_SCRIPT = textwrap.dedent(
    """
    import sys, time
    import durably
    engine = durably.Engine(sys.argv[1])
    first_live, mods = [], []
    def trivial(i):
        if not first_live:
            first_live.append(time.time())
            mods.extend(sys.modules)  # MODULES
        return {"i": i}
    @engine.workflow(name="resume")
    def many(ctx, steps):
        for i in range(steps):
            ctx.step("s", trivial, i)
        return steps
    engine.run(many, int(sys.argv[2]), run_id="crashed")
    print(first_live[0])
    """
)

# The same resume in one process, everything imported beforehand: the replay alone.
REPLAY_SCRIPT = textwrap.dedent(
    """
    import sys, time, json
    import durably
    t_import = time.perf_counter()
    durably.Engine
    t_open = time.perf_counter()
    engine = durably.Engine(sys.argv[1])
    t_opened = time.perf_counter()
    first_live = []
    def trivial(i):
        if not first_live:
            first_live.append(time.perf_counter())
        return {"i": i}
    @engine.workflow(name="resume")
    def many(ctx, steps):
        for i in range(steps):
            ctx.step("s", trivial, i)
        return steps
    t_run = time.perf_counter()
    engine.run(many, int(sys.argv[2]), run_id="crashed")
    print(json.dumps({
        "engine_import": t_open - t_import,
        "open": t_opened - t_open,
        "replay": first_live[0] - t_run,
    }))
    """
)

MODULES_SCRIPT = RESUME_SCRIPT.replace(
    "print(first_live[0])",
    "import json; print(json.dumps(sorted(mods)))",
)
RESUME_SCRIPT = RESUME_SCRIPT.replace("mods.extend(sys.modules)  # MODULES", "pass")


def child_env(src: Path) -> dict[str, str]:
    """The children's environment: cached bytecode allowed, ``src`` first on the path."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPATH"] = str(src)
    return env


def make_crashed(path: Path, steps: int, env: dict[str, str]) -> None:
    """Record a run that was SIGKILLed in its last step, folded into one file (no -wal)."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    subprocess.run(
        [sys.executable, "-c", CRASH_SCRIPT, f"sqlite:///{path}", str(steps)],
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


def one_round(side: dict[str, object], base: Path, scratch: Path, steps: int) -> dict[str, float]:
    """One measurement of each command for one checkout."""
    env = side["env"]
    assert isinstance(env, dict)
    py = sys.executable
    bare, bare_cpu, _ = spawn([py, "-c", "pass"], env)
    imp, imp_cpu, _ = spawn([py, "-c", "import durably"], env)
    engine, _, _ = spawn([py, "-c", "import durably; durably.Engine"], env)
    fresh_copy(base, scratch)
    t0 = time.time()
    whole, cpu, out = spawn([py, "-c", RESUME_SCRIPT, f"sqlite:///{scratch}", str(steps)], env)
    first_live = float(out.strip()) - t0
    return {
        "bare": bare,
        "bare_cpu": bare_cpu,
        "import": imp,
        "import_cpu": imp_cpu,
        "engine": engine,
        "restart": first_live,
        "restart_exit": whole,
        "restart_cpu": cpu,
    }


def in_process(side: dict[str, object], base: Path, scratch: Path, steps: int) -> dict[str, float]:
    """Opening the journal and replaying the history, with the imports already done."""
    env = side["env"]
    assert isinstance(env, dict)
    fresh_copy(base, scratch)
    _, _, out = spawn(
        [sys.executable, "-c", REPLAY_SCRIPT, f"sqlite:///{scratch}", str(steps)], env
    )
    got: dict[str, float] = json.loads(out)
    return got


def modules(side: dict[str, object], base: Path, scratch: Path, steps: int) -> list[str]:
    """The modules a resume has imported at its first live step."""
    env = side["env"]
    assert isinstance(env, dict)
    fresh_copy(base, scratch)
    _, _, out = spawn(
        [sys.executable, "-c", MODULES_SCRIPT, f"sqlite:///{scratch}", str(steps)], env
    )
    mods: list[str] = json.loads(out)
    return mods


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
    sides: dict[str, dict[str, object]] = {"this": {"src": HERE_SRC}}
    if args.against is not None:
        if not (args.against / "durably" / "__init__.py").is_file():
            parser.error(f"--against {args.against}: no durably/__init__.py there (give a src/)")
        sides = {"against": {"src": args.against.resolve()}, **sides}
    for side in sides.values():
        src = side["src"]
        assert isinstance(src, Path)
        side["env"] = child_env(src)
    med = statistics.median
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        got: dict[str, list[dict[str, float]]] = {name: [] for name in sides}
        bases = {}
        for name, side in sides.items():
            base = Path(d) / f"{name}-crashed.db"
            env = side["env"]
            assert isinstance(env, dict)
            make_crashed(base, args.steps, env)
            bases[name] = base
            one_round(side, base, Path(d) / "warm.db", args.steps)  # writes the bytecode
        for r in range(args.rounds):
            order = list(sides) if r % 2 == 0 else list(reversed(sides))
            for name in order:
                got[name].append(one_round(sides[name], bases[name], Path(d) / "r.db", args.steps))
        inproc = {
            name: [
                in_process(sides[name], bases[name], Path(d) / "p.db", args.steps) for _ in range(5)
            ]
            for name in sides
        }
        mods = {
            name: modules(sides[name], bases[name], Path(d) / "m.db", args.steps) for name in sides
        }
    print(
        f"restart of a crashed {args.steps}-step run on SQLite, median of {args.rounds}"
        f" interleaved rounds, {os.cpu_count()} cores, load average"
        f" {os.getloadavg()[0]:.1f} at the end (other programs share the machine)"
    )
    names = list(sides)
    print(f"  {'':48}" + "".join(f"{n:>14}" for n in names))
    ratio = {"import/bare": ("import", "bare"), "restart/import": ("restart", "import")}
    lines: list[tuple[str, Callable[[str], str]]] = [
        (f"{label} (ms)", lambda n, k=key: f"{med(x[k] for x in got[n]) * 1e3:.1f}")
        for key, label in (
            ("bare", "python -c pass"),
            ("bare_cpu", "  CPU"),
            ("import", 'python -c "import durably"'),
            ("import_cpu", "  CPU"),
            ("engine", 'python -c "import durably; durably.Engine"'),
            ("restart", "restart to the first live step"),
            ("restart_cpu", "  CPU"),
            ("restart_exit", "restart, spawn to exit (the run finished)"),
        )
    ]
    lines += [
        (label, lambda n, k=key: f"{med(x[ratio[k][0]] / x[ratio[k][1]] for x in got[n]):.2f}x")
        for key, label in (
            ("import/bare", "import durably / bare start (target <= 4x)"),
            ("restart/import", "restart / import durably (target <= 2x)"),
        )
    ]
    lines += [
        (f"in-process: {label} (ms)", lambda n, k=key: f"{med(x[k] for x in inproc[n]) * 1e3:.1f}")
        for key, label in (
            ("engine_import", "durably.Engine imported"),
            ("open", "Engine(url)"),
            ("replay", f"replay of {args.steps - 1} steps"),
        )
    ]
    lines += [
        ("modules at the first live step: durably's", lambda n: str(_own(mods[n]))),
        ("  all", lambda n: str(len(mods[n]))),
    ]
    for label, value in lines:
        print(f"  {label:48}" + "".join(f"{value(n):>14}" for n in names))


def _own(modules: list[str]) -> int:
    return sum(1 for m in modules if m.split(".")[0] == "durably")


if __name__ == "__main__":
    main()
