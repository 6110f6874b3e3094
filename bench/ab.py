"""Run one bench script against two source trees in one run, interleaved, and print its
figures side by side: ``python bench/ab.py [--rounds N] A_SRC B_SRC bench/x.py [args]``.

Each round runs the script once with ``PYTHONPATH=A_SRC`` and once with ``B_SRC``
(alternating which goes first), so drift in the machine's load or the disk's fsync
latency hits both alike. Every line the script prints that holds a number is matched by
its label (the text before its first number; later numbers on the line are ``label
[2]``, ...) across runs; the table shows the median of each side's figure and B/A.
Make a tree of another commit with ``git worktree add --detach /tmp/main main`` and
pass ``/tmp/main/src``.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

_NUMBER = re.compile(r"(?<![\w.+])-?\d[\d,]*\.?\d*")


def _figures(output: str) -> dict[str, float]:
    """label -> number, for every number of every line: a line's label is the text
    before its first number, and its later numbers are ``label [2]``, ``label [3]``..."""
    out: dict[str, float] = {}
    for line in output.splitlines():
        found = list(_NUMBER.finditer(line))
        if not found:
            continue
        label = line[: found[0].start()].strip() or line.strip()
        for i, m in enumerate(found, start=1):
            key = label if i == 1 else f"{label} [{i}]"
            if key not in out:
                out[key] = float(m.group(0).replace(",", ""))
    return out


def _run(src: Path, script: list[str]) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(src))
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as the benches' own children do
    done = subprocess.run(
        [sys.executable, *script], env=env, check=True, capture_output=True, text=True
    )
    return _figures(done.stdout)


def main() -> None:
    """Run the rounds and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path, help="source tree A (its src/ directory)")
    parser.add_argument("b", type=Path, help="source tree B")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("script", nargs=argparse.REMAINDER, help="the bench and its args")
    args = parser.parse_args()
    if not args.script:
        parser.error("name the bench script to run")
    runs: dict[str, list[dict[str, float]]] = {"A": [], "B": []}
    for r in range(args.rounds):
        order = ("A", "B") if r % 2 == 0 else ("B", "A")
        for side in order:
            runs[side].append(_run(args.a if side == "A" else args.b, args.script))
    labels = [k for k in runs["A"][0] if all(k in f for f in runs["A"] + runs["B"])]
    print(f"{' '.join(args.script)}: median of {args.rounds} interleaved rounds")
    print(f"  A = {args.a}\n  B = {args.b}")
    width = max((len(k) for k in labels), default=10)
    print(f"  {'':{width}}  {'A':>11} {'B':>11} {'B/A':>6}")
    for label in labels:
        a = statistics.median(f[label] for f in runs["A"])
        b = statistics.median(f[label] for f in runs["B"])
        ratio = f"{b / a:6.2f}" if a else "     -"
        print(f"  {label:{width}}  {a:11.3f} {b:11.3f} {ratio}")


if __name__ == "__main__":
    main()
