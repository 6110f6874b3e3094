"""One bench script under two source trees, side by side in one run.

Runs ``SCRIPT`` (any bench/ script that prints ``label  number unit`` lines) with
``PYTHONPATH`` pointing at each tree's ``src/`` in turn, interleaved round by round, so
both see the same machine load; prints each line's median per tree and their ratio
(``B/A``: below 1 means the second tree is faster). Only the source differs: the same
interpreter, venv and database server run both.

    python bench/trees.py --a /path/to/main --b . [--rounds 3] bench/step_overhead.py -- --steps 500

A tree is a checkout (``git worktree add --detach /tmp/main main`` gives one of main).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

# A figure line: indented (headers are not), a label, then the first number on the line
# (and its unit, if any).
_FIGURE = re.compile(
    r"^\s+(?P<label>[^\d\n][^\n]*?)\s+(?P<value>-?\d+(?:\.\d+)?)\s*(?P<unit>[a-zµ/x]*)"
)
# A ratio printed later on a figure's line ("... 0.829 ms   ratio 1.62x"): measured against
# the script's own baseline in the same run, so it is the figure that travels.
_RATIO = re.compile(r"\bratio\s+(?P<value>\d+(?:\.\d+)?)x")
ROUNDS_MAX = 50


def run_once(tree: Path, script: Path, extra: list[str]) -> dict[str, tuple[float, str]]:
    """The figures one run of ``script`` prints with ``tree``'s sources first on the path."""
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    out = subprocess.run(
        [sys.executable, str(script), *extra],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=1800,
    )
    if out.returncode != 0:
        raise SystemExit(f"{script} failed under {tree}:\n{out.stderr[-2000:]}")
    figures: dict[str, tuple[float, str]] = {}
    for line in out.stdout.splitlines():
        m = _FIGURE.match(line)
        if m is None:
            continue
        label = m["label"].strip()
        figures.setdefault(label, (float(m["value"]), m["unit"]))
        r = _RATIO.search(line, m.end())
        if r is not None:
            figures.setdefault(f"{label} (ratio)", (float(r["value"]), "x"))
    return figures


def main() -> None:
    """Parse the arguments, run the rounds, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", type=Path, required=True, help="the baseline tree (e.g. main)")
    parser.add_argument("--b", type=Path, required=True, help="the tree compared with it")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("script", type=Path)
    parser.add_argument("extra", nargs="*", help="arguments for the script (after --)")
    args = parser.parse_args()
    if not 1 <= args.rounds <= ROUNDS_MAX:
        raise SystemExit(f"--rounds {args.rounds}: choose 1..{ROUNDS_MAX}")
    for tree in (args.a, args.b):
        if not (tree / "src" / "durably" / "__init__.py").is_file():
            raise SystemExit(f"{tree} is no durably checkout (no src/durably/__init__.py)")
    runs: dict[str, list[dict[str, tuple[float, str]]]] = {"a": [], "b": []}
    for i in range(args.rounds):
        # Alternate which tree goes first, so neither always runs on a warmer machine.
        order = ("a", "b") if i % 2 == 0 else ("b", "a")
        for key in order:
            runs[key].append(run_once(getattr(args, key), args.script, args.extra))
    labels = [label for label in runs["a"][0] if label in runs["b"][0]]
    print(f"{args.script.name}: A={args.a} B={args.b}, median of {args.rounds} interleaved rounds")
    print(f"  {'figure':44} {'A':>10} {'B':>10}  B/A")
    for label in labels:
        a = statistics.median(r[label][0] for r in runs["a"] if label in r)
        b = statistics.median(r[label][0] for r in runs["b"] if label in r)
        unit = runs["a"][0][label][1]
        ratio = f"{b / a:5.2f}" if a else "  n/a"
        print(f"  {label[:44]:44} {a:10.3f} {b:10.3f}  {ratio}  {unit}")


if __name__ == "__main__":
    main()
