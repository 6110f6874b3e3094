"""A conversation that grows one ~2 KB message a turn: stored bytes and replay time per
turn, for a short and a long run (issue 13).

Stored whole, every turn would store the conversation again (quadratic bytes); durably
keeps each message once by content hash and a turn's record names the conversation by
one chain digest, so bytes per turn stay flat. Replay builds no manifest; it computes the
step's input digest (canonical JSON of the arguments), whose cost per turn is reported.

Run: ``python bench/conversation.py [--turns 50,200] [--dir PATH]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import durably


class Stop(BaseException):
    """Ends the recording run before its last step, like a process death."""


def reply(messages: list[dict[str, str]]) -> str:
    """The model stand-in: a small output, the whole conversation as input."""
    return f"reply {len(messages)}"


def register(engine: durably.Engine, turns: int) -> durably.Workflow:
    @engine.workflow(name=f"chat{turns}")
    def chat(ctx: durably.Context) -> int:
        messages: list[dict[str, str]] = []
        for i in range(turns):
            messages.append({"role": "user", "content": f"turn {i} " + "x" * 2000})
            ctx.step("model", reply, messages)
        return len(messages)

    return chat


def measure(folder: Path, turns: int, rounds: int) -> tuple[float, float]:
    """(stored bytes per turn, median replay seconds per turn) of a ``turns``-turn run."""
    path = folder / f"chat{turns}.db"
    engine = durably.Engine(f"sqlite:///{path}")
    wf = register(engine, turns)

    def stop_at_end(run_id: str, pos: str, name: str, window: str) -> None:
        if pos == str(turns - 1) and window == "before":
            raise Stop

    engine.fault_hook = stop_at_end
    try:
        engine.run(wf, run_id="r")
    except Stop:
        pass
    engine.close()
    conn = __import__("sqlite3").connect(path)
    stored = conn.execute(
        "SELECT (SELECT coalesce(sum(size), 0) FROM blobs)"
        " + (SELECT coalesce(sum(length(inputs) + length(output)), 0) FROM steps)"
    ).fetchone()[0]
    conn.close()
    times = []
    for _ in range(rounds):
        # Each round replays the turns-1 recorded steps up to the stop again.
        engine = durably.Engine(f"sqlite:///{path}")
        register(engine, turns)
        engine.fault_hook = stop_at_end
        t0 = time.perf_counter()
        try:
            engine.run(f"chat{turns}", run_id="r")
        except Stop:
            pass
        times.append((time.perf_counter() - t0) / (turns - 1))
        engine.close()
    return stored / (turns - 1), statistics.median(times)


def main() -> None:
    """Print bytes and replay time per turn for each conversation length."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", default="50,200", help="comma-separated run lengths")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", default=None, help="folder for the journals (default: tmp)")
    args = parser.parse_args()
    lengths = [int(t) for t in args.turns.split(",")]
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        results = {n: measure(Path(tmp), n, args.rounds) for n in lengths}
    print(f"conversation growing one ~2 KB message a turn, {os.cpu_count()} cores")
    base_bytes, base_s = results[lengths[0]]
    for n, (per_turn, replay_s) in results.items():
        print(
            f"  {n:>4} turns: {per_turn / 1024:6.2f} KiB stored per turn"
            f" ({per_turn / base_bytes:.2f}x),  replay {replay_s * 1e6:7.1f} us per turn"
            f" ({replay_s / base_s:.2f}x)"
        )


if __name__ == "__main__":
    main()
