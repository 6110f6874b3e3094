"""What ``@durably.tool`` and ``durably.tools.dispatch`` add to a tool call, beyond its
commits.

The same three tool calls per run (a read and two keyed writes), measured now, in this
run, on the same journal (alternating rounds, median per run):

- ``by hand``: three ``ctx.step(name, fn, ...)`` calls of plain functions, the writes
  declared ``effect=True`` (the baseline: the durable commits the calls need);
- ``direct``: the three calls as ``@durably.tool`` functions called in the workflow body;
- ``dispatch``: ``dispatch(ctx, response, tools)`` of an OpenAI chat completion naming
  the three calls (parse, schema check through pydantic, the steps, the result messages).

``direct / by hand`` and ``dispatch / by hand`` are the ratios printed; the difference
per run is the tools' own cost. The journal is SQLite with ``synchronous=NORMAL`` (no
fsync per commit), so the commits do not drown the difference.

    python bench/tool_dispatch.py [--runs 200] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

from openai.types.chat import ChatCompletion

import durably
from durably.tools import dispatch


def lookup(order_id: str) -> dict[str, str]:
    return {"id": order_id}


def refund(order_id: str, cents: int, idempotency_key: str) -> str:
    return f"refunded {cents}"


@durably.step(effect=True)
def refund_step(order_id: str, cents: int, idempotency_key: str) -> str:
    return f"refunded {cents}"


t_lookup = durably.tool(kind="read", name="lookup")(lookup)
t_refund = durably.tool(kind="write", name="refund")(refund)
TOOLS = [t_lookup, t_refund]
CALLS = [
    ("c1", "lookup", {"order_id": "A-1"}),
    ("c2", "refund", {"order_id": "A-1", "cents": 500}),
    ("c3", "refund", {"order_id": "A-2", "cents": 250}),
]
RESPONSE = ChatCompletion.model_validate(
    {
        "id": "x",
        "object": "chat.completion",
        "created": 0,
        "model": "bench",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "id": i,
                            "type": "function",
                            "function": {"name": n, "arguments": json.dumps(a)},
                        }
                        for i, n, a in CALLS
                    ],
                },
            }
        ],
    }
)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=200)
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        engine = durably.Engine(f"sqlite:///{tmp}/bench.db", synchronous="NORMAL")

        @engine.workflow(name="by_hand")
        def by_hand(ctx: durably.Context) -> Any:
            return [
                ctx.step("lookup", lookup, "A-1"),
                ctx.step("refund", refund_step, "A-1", 500),
                ctx.step("refund", refund_step, "A-2", 250),
            ]

        @engine.workflow(name="direct")
        def direct(ctx: durably.Context) -> Any:
            return [t_lookup("A-1"), t_refund("A-1", 500), t_refund("A-2", 250)]

        @engine.workflow(name="dispatched")
        def dispatched(ctx: durably.Context) -> Any:
            return dispatch(ctx, RESPONSE, TOOLS)

        flows: dict[str, Callable[..., Any]] = {
            "by hand": by_hand,
            "direct": direct,
            "dispatch": dispatched,
        }
        times: dict[str, list[float]] = {k: [] for k in flows}
        n = 0
        for _ in range(a.repeat):
            for name, wf in flows.items():
                for _ in range(a.runs):
                    n += 1
                    t0 = time.perf_counter()
                    engine.run(wf, run_id=f"r{n}")
                    times[name].append(time.perf_counter() - t0)
        engine.close()
    base = statistics.median(times["by hand"])
    print(f"three tool calls per run, {a.runs * a.repeat} runs each, median per run:")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(
            f"  {name:<9} {med * 1e3:7.3f} ms  x{med / base:5.2f} of by hand"
            f"  (+{(med - base) * 1e3:6.3f} ms)"
        )


if __name__ == "__main__":
    main()
