"""A LangChain agent as a durable run, offline: ``python examples/langchain_agent.py``.

The agent (a scripted ``BaseChatModel`` stands in for a provider, so no key or network
is needed) looks two orders up at once, then refunds one with a tool that asks a person
first (``wait_for_approval``). ``DurablyMiddleware`` records each model call and each
tool call as a step of the durably workflow around it:

    python examples/langchain_agent.py                  # runs until the approval, parks
    durably approvals list --db sqlite:///demo-output/langchain/journal.db
    durably approve refund-A-17 REQUEST --digest PREFIX --db ...
    python examples/langchain_agent.py                  # resumes: replays, refunds once

The second command finds the recorded model turns and tool results and asks the model
nothing it was already asked; the refund runs once, with the key durably gives its step
(``durably.current_step().idempotency_key``), which a payments service can deduplicate
on. ``--approve`` decides the approval itself, to see the whole run in one go.
"""

from __future__ import annotations

import argparse
import uuid
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool

import durably
from durably.integrations.langchain import DurablyMiddleware, wait_for_approval

RUN_ID = "refund-A-17"


class StandInModel(BaseChatModel):
    """The stand-in model: look both orders up, refund A-17, say what happened. Its
    tool-call ids are random, as a provider's are."""

    @property
    def _llm_type(self) -> str:
        return "stand-in"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self

    def _generate(self, messages: list[BaseMessage], *_: Any, **__: Any) -> ChatResult:
        turn = sum(isinstance(m, AIMessage) for m in messages)
        if turn == 0:
            calls = [("lookup_order", {"order_id": o}) for o in ("A-17", "A-18")]
        elif turn == 1:
            calls = [("refund", {"order_id": "A-17", "cents": 4000})]
        else:
            said = messages[-1].content if isinstance(messages[-1], ToolMessage) else ""
            return ChatResult(generations=[ChatGeneration(message=AIMessage(f"Done: {said}"))])
        message = AIMessage(
            "",
            tool_calls=[
                {"name": n, "args": a, "id": f"call_{uuid.uuid4().hex[:8]}"} for n, a in calls
            ],
            usage_metadata={"input_tokens": 120, "output_tokens": 20, "total_tokens": 140},
        )
        return ChatResult(generations=[ChatGeneration(message=message)])


@tool
def lookup_order(order_id: str) -> dict[str, object]:
    """Look an order up by its id."""
    return {"id": order_id, "total_cents": 4000}


@tool
def refund(order_id: str, cents: int) -> str:
    """Refund an order (a person approves first)."""
    wait_for_approval(
        "refund", {"order_id": order_id, "cents": cents}
    )  # first: no effect before it
    step = durably.current_step()
    key = step.idempotency_key if step else "-"
    # A real tool sends `key` as the payments service's Idempotency-Key.
    return f"refunded {cents} cents on {order_id} (key {key})"


agent = create_agent(
    StandInModel(), [lookup_order, refund], middleware=[DurablyMiddleware("support")]
)


def build(url: str) -> tuple[durably.Engine, durably.Workflow]:
    engine = durably.Engine(url, park_wait_s=0)

    @engine.workflow(name="support")
    def support(ctx: durably.Context, request: str) -> str:
        state = agent.invoke({"messages": [("user", request)]})
        return str(state["messages"][-1].content)

    return engine, support


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", default="sqlite:///demo-output/langchain/journal.db")
    parser.add_argument("--approve", action="store_true", help="approve the refund here")
    args = parser.parse_args()
    if args.db.startswith("sqlite:///"):
        Path(args.db.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    engine, support = build(args.db)
    try:
        while True:
            try:
                print(engine.run(support, "refund A-17", run_id=RUN_ID))
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
