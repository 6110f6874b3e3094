"""Instructions (valgrind) of a restart and of a live step: figures that load does not move.

Wall and CPU times on a shared machine drift by 2x between runs; an instruction count of
the same program does not. Prints, for this checkout and optionally another's ``src/``:
- ``python -c pass``, ``python -c "import durably"`` and ``import durably; durably.Engine``;
- a restart: ``bench/restart.py``'s child resuming a copy of a crashed N-step journal,
  counted to the child's exit;
- a live step, process durability, a journal in ``--dir``: (300 steps minus 0) / 300, with
  a module-level step function and with a fresh ``lambda`` per step.

    python bench/instructions.py [--steps N] [--dir PATH] [--against SRC]

Needs ``valgrind`` on PATH (callgrind counts each instruction: about 50x slower).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import restart  # bench/restart.py: its child program and crashed-journal helpers

STEPS = """
import os, sys, durably
n = int(sys.argv[2])
def f(i):
    return {"i": i}
engine = durably.Engine(sys.argv[1], durability="process")
@engine.workflow(name="w")
def w(ctx, n):
    for i in range(n):
        ctx.step("s", (lambda i: {"i": i}) if sys.argv[3] == "lambda" else f, i)
    return n
engine.run(w, n, run_id="r")
"""


def count(args: list[str], env: dict[str, str]) -> int:
    """Instructions of one run of ``python *args``."""
    out = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, *args],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    )
    found = re.search(r"Collected : (\d+)", out.stderr)
    if found is None:
        sys.exit(f"no instruction count in valgrind's output:\n{out.stderr[-2000:]}")
    return int(found.group(1))


def measure(src: Path, steps: int, d: Path) -> dict[str, float]:
    """Every figure for one checkout (bytecode written by a first run of each)."""
    env = restart.child_env(src)
    crashed, scratch = d / "crashed.db", d / "scratch.db"
    restart.make_crashed(crashed, steps, env)
    got: dict[str, float] = {}
    for key, code in (
        ("bare", "pass"),
        ("import", "import durably"),
        ("engine", "import durably; durably.Engine"),
    ):
        subprocess.run([sys.executable, "-c", code], check=True, env=env, capture_output=True)
        got[key] = count(["-c", code], env)
    url = f"sqlite:///{scratch}"
    restart.fresh_copy(crashed, scratch)
    warm = [sys.executable, "-c", restart.CHILD, url, str(steps), "resume"]
    subprocess.run(warm, check=True, env=env, capture_output=True)  # writes the bytecode
    restart.fresh_copy(crashed, scratch)
    got["restart"] = count(["-c", restart.CHILD, url, str(steps), "resume"], env)
    for kind in ("def", "lambda"):
        runs = []
        for n in (0, 300):
            journal = d / f"steps-{kind}-{n}.db"
            runs.append(count(["-c", STEPS, f"sqlite:///{journal}", str(n), kind], env))
        got[f"step_{kind}"] = (runs[1] - runs[0]) / 300
    return got


ROWS = (
    ("bare", "python -c pass", 1e6, "M"),
    ("import", 'python -c "import durably"', 1e6, "M"),
    ("engine", 'python -c "import durably; durably.Engine"', 1e6, "M"),
    ("restart", "restart of the crashed run, to the child's exit", 1e6, "M"),
    ("step_def", "a live step, module-level function", 1e3, "k"),
    ("step_lambda", "a live step, a fresh lambda each", 1e3, "k"),
)


def main() -> None:
    """Count and print each figure and the restart / import ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000, help="steps of the crashed run")
    parser.add_argument("--dir", type=Path, default=None, help="where the journals go")
    parser.add_argument("--against", type=Path, default=None, help="src/ of a second checkout")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not on PATH: install it (apt-get install valgrind) to count")
    sides = {"this": restart.HERE_SRC}
    if args.against is not None:
        sides = {"against": args.against.resolve(), **sides}
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        got = {}
        for name, src in sides.items():
            side = Path(d) / name
            side.mkdir()
            got[name] = measure(src, args.steps, side)
    print(f"instructions (valgrind callgrind), crashed run of {args.steps} steps")
    print(f"  {'':50}" + "".join(f"{n:>12}" for n in sides))
    for key, label, unit, suffix in ROWS:
        cells = "".join(f"{got[n][key] / unit:11.1f}{suffix}" for n in sides)
        print(f"  {label:50}{cells}")
    ratio = "".join(f"{got[n]['restart'] / got[n]['import']:11.2f}x" for n in sides)
    print(f"  {'restart / import durably (target <= 2x)':50}{ratio}")


if __name__ == "__main__":
    main()
