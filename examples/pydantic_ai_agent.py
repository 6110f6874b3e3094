"""A Pydantic AI agent as a durable run, offline: ``python examples/pydantic_ai_agent.py``.

The agent (Pydantic AI's own ``FunctionModel`` stands in for a provider, so no key or
network is needed) looks an order up, then refunds it with a tool that asks a person
first (``requires_approval=True``). ``DurableAgent`` records each model request and each
tool call as a step of the durably workflow around it:

    python examples/pydantic_ai_agent.py                  # runs until the approval, parks
    durably approvals list --db sqlite:///demo-output/pydantic_ai/journal.db
    durably approve refund-A-17 REQUEST --digest PREFIX --db ...
    python examples/pydantic_ai_agent.py                  # resumes: replays, refunds once

The second command finds the recorded model turns and tool results and asks the model
nothing it was already asked; the refund runs once, with the key durably gives its step
(``durably.current_step().idempotency_key``), which a payments service can deduplicate
on. ``--approve`` decides the approval itself, to see the whole run in one go.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import durably
from durably.integrations.pydantic_ai import DurableAgent

RUN_ID = "refund-A-17"


def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The stand-in model: look the order up, refund it, then say what happened."""
    turn = sum(isinstance(m, ModelResponse) for m in messages)
    if turn == 0:
        return ModelResponse(parts=[ToolCallPart("lookup_order", {"order_id": "A-17"})])
    if turn == 1:
        return ModelResponse(parts=[ToolCallPart("refund", {"order_id": "A-17", "cents": 4000})])
    said = getattr(messages[-1].parts[0], "content", "")
    return ModelResponse(parts=[TextPart(f"Done: {said}")])


agent: Agent[None, str] = Agent(FunctionModel(model), name="support")


@agent.tool_plain
def lookup_order(order_id: str) -> dict[str, object]:
    """Look an order up by its id."""
    return {"id": order_id, "total_cents": 4000}


@agent.tool_plain(requires_approval=True)
def refund(order_id: str, cents: int) -> str:
    """Refund an order (a person approves first)."""
    step = durably.current_step()
    key = step.idempotency_key if step else "-"
    # A real tool sends `key` as the payments service's Idempotency-Key.
    return f"refunded {cents} cents on {order_id} (key {key})"


durable = DurableAgent(agent)


def build(url: str) -> tuple[durably.Engine, durably.Workflow]:
    engine = durably.Engine(url, park_wait_s=0)

    @engine.workflow(name="support")
    async def support(ctx: durably.AsyncContext, request: str) -> str:
        result = await durable.run(request)
        return result.output

    return engine, support


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", default="sqlite:///demo-output/pydantic_ai/journal.db")
    parser.add_argument("--approve", action="store_true", help="approve the refund here")
    args = parser.parse_args()
    if args.db.startswith("sqlite:///"):
        Path(args.db.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    engine, support = build(args.db)
    try:
        while True:
            try:
                print(asyncio.run(engine.run_async(support, "refund A-17", run_id=RUN_ID)))
                break
            except durably.RunParked:
                [pending] = [p for p in engine.pending_approvals() if p.run_id == RUN_ID]
                print(f"parked: {pending.action} {pending.args} (request {pending.request_id})")
                if not args.approve:
                    print(
                        f"approve: durably approve {RUN_ID} {pending.request_id} --digest"
                        f" {pending.digest[:12]} --db {args.db}; then run this again"
                    )
                    return
                engine.approve(RUN_ID, pending.request_id, digest=pending.digest, by="example")
        for step in engine.history(RUN_ID):
            print(f"  {step.position:>5}  {step.name}")
    finally:
        engine.close()


if __name__ == "__main__":
    main()
