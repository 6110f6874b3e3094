"""``DurablyMiddleware`` in one process: outside a workflow the agent is untouched; a
streamed run's tokens reach a follower as ``model.delta`` events (sync and async); an
async agent's parallel tool calls take the model's order; ``wait_for_approval`` parks
the run, ``durably approve`` (the CLI) resumes it and a rejection is the tool's answer;
a ``@durably.tool`` keeps its kind; usage and prices go into the run's spend and
budget; a structured response replays as its type; ``interrupt()``, a ``Command``
result and a sync agent in an async workflow block the run; digests leave out
LangChain's generated ids and metadata. (Crashes: test_crash.py.)"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import uuid
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import pytest
from click.testing import CliRunner
from langchain.agents import create_agent
from langchain.agents.middleware import ModelRequest
from langchain.agents.structured_output import ToolStrategy
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import InjectedToolCallId, tool
from langgraph.types import Command, interrupt

import durably
from durably.cli import main as cli
from durably.integrations.langchain import DurablyMiddleware, wait_for_approval
from durably.integrations.langchain._digest import model_call

from ..crash_harness import world
from .agent_app import ScriptedModel, build


def rows(tmp: Path, sql: str) -> list[tuple[Any, ...]]:
    with closing(sqlite3.connect(tmp / "world.db")) as w:
        return list(w.execute(sql))


def url(tmp: Path) -> str:
    return f"sqlite:///{tmp / 'journal.db'}"


def test_outside_a_workflow_the_agent_runs_as_without_durably(tmp_path: Path) -> None:
    seen: list[Any] = []

    @tool
    def record_order(item: str) -> str:
        """Record an order."""
        seen.append(durably.current_step())
        return f"record_order {item} ok"

    outputs = []
    for middleware in ([], [DurablyMiddleware("shop")]):
        model = ScriptedModel(world_db=str(tmp_path / "world.db"), scenario="parallel")
        agent = create_agent(model, [record_order], middleware=middleware)
        state = agent.invoke({"messages": [("user", "order please")]})
        outputs.append([(type(m).__name__, m.content) for m in state["messages"]])
    assert outputs[0] == outputs[1]
    assert outputs[1][-1] == ("AIMessage", "done: record_order a ok; record_order b ok")
    assert seen == [None] * 4  # no step around the tool: nothing recorded
    assert [t for (t,) in rows(tmp_path, "SELECT turn FROM model_calls")] == [1, 2] * 2


@pytest.mark.parametrize("scenario", ["stream", "astream"])
def test_a_streamed_run_delivers_model_deltas_to_a_follower(tmp_path: Path, scenario: str) -> None:
    engine, shop = build(url(tmp_path), str(tmp_path / "world.db"), scenario, None)
    try:
        engine.start(shop, "order please", run_id="s-1")
        texts: list[str] = []

        def follow() -> None:
            for event in engine.follow("s-1", poll_s=0.01):
                if event.kind == "model.delta":
                    texts.append(event.data["text"])

        follower = threading.Thread(target=follow)
        follower.start()
        if scenario == "astream":
            out = asyncio.run(engine.run_async(shop, "order please", run_id="s-1"))
        else:
            out = engine.run(shop, "order please", run_id="s-1")
        follower.join(timeout=30)
        assert out == "done: record_order a ok"
        assert "".join(texts) == out and len(texts) == 4  # token by token, each once
    finally:
        engine.close()


def test_an_async_agent_records_parallel_calls_in_the_models_order(tmp_path: Path) -> None:
    engine, shop = build(url(tmp_path), str(tmp_path / "world.db"), "async", None)
    try:
        out = asyncio.run(engine.run_async(shop, "order please", run_id="a-1"))
        again = asyncio.run(engine.run_async(shop, "order please", run_id="a-1"))
    finally:
        engine.close()
    assert out == again == "done: record_order a ok; record_order b ok"
    keys = rows(tmp_path, "SELECT item, key FROM attempts ORDER BY item")
    assert [(i, k.rsplit(":", 1)[1]) for i, k in keys] == [("a", "1.0.0"), ("b", "1.1.0")]
    assert [t for (t,) in rows(tmp_path, "SELECT turn FROM model_calls")] == [1, 2]


@pytest.mark.parametrize(
    ("scenario", "decide"),
    [("approval", "approve"), ("approval", "reject"), ("aapproval", "approve")],
)
def test_wait_for_approval_parks_the_run_until_a_decision(
    tmp_path: Path, scenario: str, decide: str
) -> None:
    engine, shop = build(url(tmp_path), str(tmp_path / "world.db"), scenario, None, park_wait_s=0)

    def run() -> Any:
        if scenario == "aapproval":
            return asyncio.run(engine.run_async(shop, "order please", run_id="r-1"))
        return engine.run(shop, "order please", run_id="r-1")

    try:
        with pytest.raises(durably.RunParked):
            run()
        [pending] = engine.pending_approvals()
        assert (pending.action, pending.args) == ("refund", {"amount": 30})
        assert rows(tmp_path, "SELECT * FROM attempts") == []  # parked before the write
        if decide == "approve":  # through the CLI, as a person would
            args = ["approve", "r-1", pending.request_id, "--digest", pending.digest[:12]]
            decided = CliRunner().invoke(cli, [*args, "--by", "ana", "--db", url(tmp_path)])
            assert decided.exit_code == 0, decided.output
        else:
            engine.reject("r-1", pending.request_id, digest=pending.digest, by="ana", reason="no")
        out = run()
    finally:
        engine.close()
    if decide == "approve":
        assert out == "done: refund 30 ok"
        assert rows(tmp_path, "SELECT tool, item FROM attempts") == [("refund", "30")]
    else:
        assert out == "done: The tool call was not approved (rejected: no)."
        assert rows(tmp_path, "SELECT * FROM attempts") == []
    # The parked run was replayed on wake: the model's first turn was not asked again.
    assert [t for (t,) in rows(tmp_path, "SELECT turn FROM model_calls")] == [1, 2]


def test_wait_for_approval_outside_a_recorded_tool_says_what_to_do() -> None:
    with pytest.raises(durably.ConfigError, match="DurablyMiddleware"):
        wait_for_approval("refund", {"amount": 1})


def test_the_models_usage_counts_against_the_runs_budget(tmp_path: Path) -> None:
    model = ScriptedModel(world_db=str(tmp_path / "world.db"), scenario="single")

    ran: list[str] = []

    @tool
    def record_order(item: str) -> str:
        """Record an order."""
        ran.append(item)
        return "ok"

    agent = create_agent(model, [record_order], middleware=[DurablyMiddleware()])
    engine = durably.Engine(url(tmp_path))

    @engine.workflow(name="tight")
    def tight(ctx: durably.Context) -> str:
        ctx.budget(tokens=10)  # each model call reports 15: over at the first
        return str(agent.invoke({"messages": [("user", "go")]})["messages"][-1].content)

    try:
        with pytest.raises(durably.WorkflowFailed, match="spent 15 tokens, more than its"):
            engine.run(tight, run_id="b-1")
    finally:
        engine.close()
    assert ran == []  # stopped at the position after the charge: the tool call's


def test_digests_leave_out_generated_ids_and_metadata() -> None:
    def request(call_id: str, message_id: str, text: str = "hi") -> ModelRequest:
        return ModelRequest(
            model=ScriptedModel(world_db=":memory:", scenario="single"),
            messages=[
                HumanMessage(text, id=message_id),
                AIMessage(
                    "",
                    id=f"lc_run--{message_id}",
                    tool_calls=[{"name": "t", "args": {"x": 1}, "id": call_id}],
                    response_metadata={"created": message_id},
                    usage_metadata={"input_tokens": 1, "output_tokens": 2, "total_tokens": 3},
                ),
                ToolMessage("done", tool_call_id=call_id),
            ],
        )

    assert model_call(request("call_1", "m1")) == model_call(request("call_2", "m2"))
    assert model_call(request("call_1", "m1")) != model_call(request("call_1", "m1", "ho"))


def test_a_durably_tool_keeps_its_kinds_rules(tmp_path: Path) -> None:
    ran: list[str] = []

    @durably.tool(kind="destructive")  # a person approves each call first
    def refund(amount: int) -> str:
        """Refund ``amount`` dollars."""
        ran.append(str(durably.current_step().idempotency_key))  # type: ignore[union-attr]
        return f"refunded {amount}"

    model = ScriptedModel(world_db=str(tmp_path / "world.db"), scenario="approval")
    agent = create_agent(model, [tool(refund)], middleware=[DurablyMiddleware("shop")])
    engine = durably.Engine(url(tmp_path), park_wait_s=0)

    @engine.workflow(name="shop")
    def shop(ctx: durably.Context) -> str:
        return str(agent.invoke({"messages": [("user", "go")]})["messages"][-1].content)

    try:
        with pytest.raises(durably.RunParked):
            engine.run(shop, run_id="k-1")
        [pending] = engine.pending_approvals()
        assert (pending.action, pending.args) == ("langchain.shop.tool.refund", {"amount": 30})
        assert ran == []
        engine.approve("k-1", pending.request_id, digest=pending.digest, by="ana")
        assert engine.run(shop, run_id="k-1") == "done: refunded 30"
    finally:
        engine.close()
    assert len(ran) == 1 and ran[0].endswith(":1.0.1")  # the approval at 1.0.0, then the step


def test_a_sync_agent_in_an_async_workflow_is_refused_and_blocks_the_run(
    tmp_path: Path,
) -> None:
    model = ScriptedModel(world_db=str(tmp_path / "world.db"), scenario="single")
    agent = create_agent(model, [], middleware=[DurablyMiddleware()])
    engine = durably.Engine(url(tmp_path))

    @engine.workflow(name="mixed")
    async def mixed(ctx: durably.AsyncContext) -> Any:
        return agent.invoke({"messages": [("user", "go")]})

    try:
        with pytest.raises(durably.ConfigError, match=r"await agent\.ainvoke"):
            asyncio.run(engine.run_async(mixed, run_id="m-1"))
        assert engine.get_run("m-1").status == "blocked"
    finally:
        engine.close()
    assert not (tmp_path / "world.db").exists()  # the model was never asked


def test_interrupt_in_a_tool_blocks_the_run_and_a_fixed_tool_runs_on_retry(
    tmp_path: Path,
) -> None:
    fixed: list[bool] = []
    ran: list[str] = []

    @tool
    def refund(amount: int) -> str:
        """Refund ``amount`` dollars."""
        if not fixed:
            interrupt({"approve": amount})  # LangGraph's: not resumable through middleware
        ran.append(str(durably.current_step().idempotency_key))  # type: ignore[union-attr]
        return "refunded"

    model = ScriptedModel(world_db=str(tmp_path / "world.db"), scenario="approval")
    agent = create_agent(model, [refund], middleware=[DurablyMiddleware("shop")])
    engine = durably.Engine(url(tmp_path))

    @engine.workflow(name="shop")
    def shop(ctx: durably.Context) -> str:
        return str(agent.invoke({"messages": [("user", "go")]})["messages"][-1].content)

    try:
        with pytest.raises(durably.ConfigError, match="wait_for_approval"):
            engine.run(shop, run_id="i-1")
        assert engine.get_run("i-1").status == "blocked" and ran == []
        fixed.append(True)  # the code is fixed, the run retried
        engine.retry("i-1")
        assert engine.run(shop, run_id="i-1") == "done: refunded"
    finally:
        engine.close()
    # The interrupted call is recorded at 1.0.0, the fixed one ran once at 1.0.1.
    assert len(ran) == 1 and ran[0].endswith(":1.0.1")
    assert [t for (t,) in rows(tmp_path, "SELECT turn FROM model_calls")] == [1, 2]


def test_a_tool_returning_a_command_blocks_the_run(tmp_path: Path) -> None:
    @tool
    def record_order(item: str, call_id: Annotated[str, InjectedToolCallId]) -> Command[Any]:
        """Record an order."""
        return Command(update={"messages": [ToolMessage(item, tool_call_id=call_id)]})

    model = ScriptedModel(world_db=str(tmp_path / "world.db"), scenario="single")
    agent = create_agent(model, [record_order], middleware=[DurablyMiddleware("shop")])
    engine = durably.Engine(url(tmp_path))

    @engine.workflow(name="shop")
    def shop(ctx: durably.Context) -> Any:
        return agent.invoke({"messages": [("user", "go")]})["messages"][-1].content

    try:
        with pytest.raises(durably.ConfigError, match="returned Command, not a ToolMessage"):
            engine.run(shop, run_id="c-1")
        assert engine.get_run("c-1").status == "blocked"
    finally:
        engine.close()


def test_usage_and_prices_go_into_the_runs_spend(tmp_path: Path) -> None:
    @tool
    def record_order(item: str) -> str:
        """Record an order."""
        return "ok"

    model = ScriptedModel(world_db=str(tmp_path / "world.db"), scenario="single")
    priced = DurablyMiddleware(prices={"ScriptedModel": (1.0, 2.0)})  # USD per million
    agent = create_agent(model, [record_order], middleware=[priced])
    engine = durably.Engine(url(tmp_path))

    @engine.workflow(name="priced")
    def run(ctx: durably.Context) -> Any:
        return agent.invoke({"messages": [("user", "go")]})["messages"][-1].content

    try:
        engine.run(run, run_id="p-1")
        spend = engine.spend("p-1")
    finally:
        engine.close()
    assert (spend.input_tokens, spend.output_tokens) == (20, 10)  # two calls of 10 + 5
    assert spend.cost_usd == pytest.approx((20 * 1.0 + 10 * 2.0) / 1e6)
    with pytest.raises(ValueError, match="two numbers >= 0"):
        DurablyMiddleware(prices={"m": (1.0, -1.0)})


@dataclass
class Order:
    """The agent's structured answer."""

    item: str
    count: int


class StructuredModel(ScriptedModel):
    """Answers at once through the structured-output tool LangChain gives it."""

    def _generate(self, messages: list[Any], *_: Any, **__: Any) -> Any:
        with closing(world(self.world_db)) as w:
            w.execute("INSERT INTO model_calls VALUES (1, 0)")
        call = {"name": "Order", "args": {"item": "a", "count": 2}, "id": uuid.uuid4().hex}
        return ChatResult(generations=[ChatGeneration(message=AIMessage("", tool_calls=[call]))])


def test_a_structured_response_replays_as_its_schemas_type(tmp_path: Path) -> None:
    model = StructuredModel(world_db=str(tmp_path / "world.db"), scenario="single")
    agent = create_agent(
        model, [], response_format=ToolStrategy(Order), middleware=[DurablyMiddleware()]
    )
    engine = durably.Engine(url(tmp_path), park_wait_s=0)
    seen: list[Any] = []

    @engine.workflow(name="structured")
    def structured(ctx: durably.Context) -> str:
        seen.append(agent.invoke({"messages": [("user", "go")]})["structured_response"])
        ctx.wait_for_signal("go")  # parks: the resumed run replays the model call
        return "ok"

    try:
        with pytest.raises(durably.RunParked):
            engine.run(structured, run_id="o-1")
        engine.signal("o-1", "go")
        assert engine.run(structured, run_id="o-1") == "ok"
    finally:
        engine.close()
    assert seen == [Order("a", 2), Order("a", 2)]  # live, then rebuilt from the record
    assert rows(tmp_path, "SELECT turn FROM model_calls") == [(1,)]
