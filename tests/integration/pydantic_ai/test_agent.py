"""``DurableAgent`` in one process, with Pydantic AI's ``TestModel``/``FunctionModel``:
outside a workflow it is the agent itself; inside, usage reaches the run's spend, a
streamed run's fragments reach a follower as ``model.delta`` events, a
``@durably.tool`` keeps its kind's rules, and the digests leave out what the framework
makes up on every run."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent, ModelRetry
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturn,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

import durably
from durably.integrations.pydantic_ai import DurableAgent
from durably.integrations.pydantic_ai._digest import model_request, strip


def engine_at(tmp: Path, **options: Any) -> durably.Engine:
    return durably.Engine(f"sqlite:///{tmp / 'journal.db'}", **options)


def calc_agent() -> Agent[None, str]:
    agent: Agent[None, str] = Agent(TestModel(), name="calc")

    @agent.tool_plain
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    return agent


def shape(messages: list[ModelMessage]) -> Any:
    return strip(ModelMessagesTypeAdapter.dump_python(messages, mode="json"))


def test_outside_a_workflow_the_agent_is_unchanged(tmp_path: Path) -> None:
    agent = calc_agent()
    plain = asyncio.run(agent.run("add"))
    durable = DurableAgent(agent)
    wrapped = asyncio.run(durable.run("add"))
    assert durable.durable_name == "calc" and durable.name == "calc"
    assert wrapped.output == plain.output
    assert shape(wrapped.all_messages()) == shape(plain.all_messages())
    assert wrapped.usage == plain.usage

    # Inside a step the step is what is recorded: the agent runs as it is, untouched.
    engine = engine_at(tmp_path)

    async def in_a_step() -> str:
        return (await durable.run("add")).output

    @engine.workflow(name="outer")
    async def outer(ctx: durably.AsyncContext) -> str:
        out: str = await ctx.step("whole-agent", in_a_step)
        return out

    try:
        assert asyncio.run(engine.run_async(outer, run_id="o-1")) == plain.output
        assert [s.name for s in engine.history("o-1")] == ["whole-agent"]
    finally:
        engine.close()


def test_steps_names_and_usage_in_the_spend(tmp_path: Path) -> None:
    durable = DurableAgent(calc_agent(), name="calc-1")
    engine = engine_at(tmp_path)

    @engine.workflow(name="calc")
    async def calc(ctx: durably.AsyncContext) -> Any:
        result = await durable.run("add")
        u = result.usage
        return [result.output, u.input_tokens, u.output_tokens]

    try:
        _, ins, outs = asyncio.run(engine.run_async(calc, run_id="c-1"))
        assert [(s.position, s.name) for s in engine.history("c-1")] == [
            ("0", "pydantic_ai.calc-1.model.request"),
            ("1", "durably.gather"),  # the turn's tool calls: one ordered branch each
            ("1.0.0", "pydantic_ai.calc-1.tool.add"),
            ("2", "pydantic_ai.calc-1.model.request"),
        ]
        spend = engine.spend("c-1")
        assert (spend.input_tokens, spend.output_tokens) == (ins, outs) and ins > 0
    finally:
        engine.close()


def test_a_bad_name_or_a_sync_workflow_is_refused(tmp_path: Path) -> None:
    with pytest.raises(durably.ConfigError, match="stable name"):
        DurableAgent(Agent(TestModel()))
    with pytest.raises(durably.ConfigError, match="stable name"):
        DurableAgent(calc_agent(), name="has space")
    durable = DurableAgent(calc_agent())
    engine = engine_at(tmp_path)

    @engine.workflow(name="sync")
    def sync(ctx: durably.Context) -> str:
        return asyncio.run(durable.run("add")).output

    @durably.tool(kind="write")
    def charge(cents: int, idempotency_key: str) -> str:
        """Charge a card."""
        return "charged"

    keyed = DurableAgent(Agent(TestModel(), name="pay", tools=[charge]))

    @engine.workflow(name="keyed")
    async def keyed_wf(ctx: durably.AsyncContext) -> str:
        return (await keyed.run("pay")).output

    try:
        # Refused through a step: the run is blocked (fix the code, retry), not failed.
        with pytest.raises(durably.ConfigError, match="async workflow"):
            engine.run(sync, run_id="s-1")
        assert engine.get_run("s-1").status == "blocked"
        with pytest.raises(durably.ConfigError, match="idempotency_key"):
            asyncio.run(engine.run_async(keyed_wf, run_id="k-1"))
        assert engine.get_run("k-1").status == "blocked"
    finally:
        engine.close()


async def _stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
    for word in ("The", " answer", " is", " 42."):
        yield word


def test_a_streamed_run_delivers_model_deltas_to_a_follower(tmp_path: Path) -> None:
    agent: Agent[None, str] = Agent(FunctionModel(stream_function=_stream), name="talk")
    durable = DurableAgent(agent)
    engine = engine_at(tmp_path)

    @engine.workflow(name="talk")
    async def talk(ctx: durably.AsyncContext) -> str:
        async with durable.run_stream("speak") as streamed:
            text = ""
            async for delta in streamed.stream_text(delta=True):
                text += delta
            return text

    seen: list[durably.Event] = []

    def follow() -> None:
        watcher = durably.Engine(f"sqlite:///{tmp_path / 'journal.db'}")
        try:
            seen.extend(watcher.follow("t-1", poll_s=0.02))
        finally:
            watcher.close()

    try:
        engine.start(talk, run_id="t-1")  # the run exists before the follower reads it
        follower = threading.Thread(target=follow)
        follower.start()
        text = asyncio.run(engine.run_async(talk, run_id="t-1"))
        follower.join(30)
        assert text == "The answer is 42."
        deltas = [d for d in map(delta_data, seen) if d is not None]
        assert "".join(d["text"] for d in deltas) == text
        assert {d["position"] for d in deltas} == {"0"}
        # Live: every fragment was written before the model request's step was recorded.
        [recorded] = [e.cursor for e in seen if e.kind == "step.completed" and e.position == "0"]
        assert max(e.cursor for e in seen if e.kind == "model.delta") < recorded
    finally:
        engine.close()


def delta_data(e: durably.Event) -> dict[str, Any] | None:
    """The data of a ``model.delta`` event, with its position; else None."""
    if e.kind != "model.delta":
        return None
    return {**e.data, "position": e.position}


def test_a_durably_tool_keeps_its_kind(tmp_path: Path) -> None:
    ran: list[str] = []

    @durably.tool(kind="destructive")
    def wipe(disk: str) -> str:
        """Wipe a disk."""
        info = durably.current_step()
        assert info is not None
        ran.append(f"{disk} {info.position}")
        return f"wiped {disk}"

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("wipe", {"disk": "d1"})])
        return ModelResponse(parts=[TextPart(str(messages[-1].parts[0].content))])

    agent: Agent[None, str] = Agent(FunctionModel(model), name="ops", tools=[wipe])
    durable = DurableAgent(agent)
    engine = engine_at(tmp_path, park_wait_s=0)

    @engine.workflow(name="ops")
    async def ops(ctx: durably.AsyncContext) -> str:
        return (await durable.run("wipe it")).output

    try:
        with pytest.raises(durably.RunParked):
            asyncio.run(engine.run_async(ops, run_id="w-1"))
        [pending] = engine.pending_approvals()
        assert pending.action == "pydantic_ai.ops.tool.wipe" and pending.args == {"disk": "d1"}
        assert ran == []
        engine.approve("w-1", pending.request_id, digest=pending.digest, by="ana")
        assert asyncio.run(engine.run_async(ops, run_id="w-1")) == "wiped d1"
        assert len(ran) == 1
    finally:
        engine.close()


def test_digests_leave_out_generated_ids_and_timestamps() -> None:
    def conversation(stamp: str, call_id: str, run_id: str) -> list[ModelMessage]:
        return ModelMessagesTypeAdapter.validate_python(
            ModelMessagesTypeAdapter.dump_python(
                [
                    ModelRequest(parts=[UserPromptPart("hi")], run_id=run_id),
                    ModelResponse(
                        parts=[ToolCallPart("add", {"a": 1}, tool_call_id=call_id)], run_id=run_id
                    ),
                    ModelRequest(parts=[ToolReturnPart("add", 1, tool_call_id=call_id)]),
                ],
                mode="json",
            )
        )

    first = conversation("a", "call-1", "run-a")
    again = conversation("b", "call-2", "run-b")
    assert model_request("m", first, {}, None) == model_request("m", again, {}, None)
    changed = ModelMessagesTypeAdapter.validate_python(
        [*ModelMessagesTypeAdapter.dump_python(first, mode="json")[:2]]
    )
    assert model_request("m", changed, {}, None) != model_request("m", first, {}, None)
    # What a request travels with is not what it asks; headers are never recorded.
    asked = model_request("m", first, {"temperature": 0.1, "extra_headers": {"x": "k"}}, None)
    assert asked["settings"] == {"temperature": 0.1}


def test_a_rejected_approval_tool_call_goes_back_to_the_model_as_its_denial(
    tmp_path: Path,
) -> None:
    ran: list[int] = []
    asked: list[int] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        asked.append(len(messages))
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("refund", {"amount": 30})])
        return ModelResponse(parts=[TextPart(str(messages[-1].parts[0].content))])

    agent: Agent[None, str] = Agent(FunctionModel(model), name="shop")

    @agent.tool_plain(requires_approval=True)
    def refund(amount: int) -> str:
        ran.append(amount)
        return "refunded"

    durable = DurableAgent(agent)
    engine = engine_at(tmp_path, park_wait_s=0)

    @engine.workflow(name="shop")
    async def shop(ctx: durably.AsyncContext) -> str:
        return (await durable.run("refund it")).output

    try:
        with pytest.raises(durably.RunParked):
            asyncio.run(engine.run_async(shop, run_id="r-1"))
        [pending] = engine.pending_approvals()
        assert pending.action == "pydantic_ai.shop.tool.refund"
        engine.reject("r-1", pending.request_id, digest=pending.digest, by="ana", reason="no")
        out = asyncio.run(engine.run_async(shop, run_id="r-1"))
        assert out == "The tool call was rejected by ana: no"
        assert ran == [] and asked == [1, 3]  # the first turn replayed, not asked again
    finally:
        engine.close()


def test_a_streamed_turn_replays_from_its_record(tmp_path: Path) -> None:
    streamed: list[int] = []

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        streamed.append(len(messages))
        async for word in _stream(messages, info):
            yield word

    agent: Agent[None, str] = Agent(FunctionModel(stream_function=stream), name="talk")
    durable = DurableAgent(agent)
    engine = engine_at(tmp_path, park_wait_s=0)

    @engine.workflow(name="talk")
    async def talk(ctx: durably.AsyncContext) -> Any:
        async with durable.run_stream("speak") as result:
            chunks = [c async for c in result.stream_text(delta=True, debounce_by=None)]
        go = await ctx.wait_for_signal("go")  # parks; the wake replays from the top
        return [chunks, go]

    try:
        with pytest.raises(durably.RunParked):
            asyncio.run(engine.run_async(talk, run_id="s-1"))
        engine.signal("s-1", "go", "now")
        chunks, go = asyncio.run(engine.run_async(talk, run_id="s-1"))
        # The replayed stream gives the caller the same fragments; the model streamed once.
        assert (chunks, go) == (["The", " answer", " is", " 42."], "now")
        assert streamed == [1]
    finally:
        engine.close()


def test_model_retry_and_tool_return_replay_as_they_ran(tmp_path: Path) -> None:
    ran: list[int] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        turn = sum(isinstance(m, ModelResponse) for m in messages)
        if turn < 2:
            return ModelResponse(parts=[ToolCallPart("flaky", {"x": turn + 1})])
        return ModelResponse(parts=[TextPart(str(messages[-1].parts[0].content))])

    agent: Agent[None, str] = Agent(FunctionModel(model), name="retry")

    @agent.tool_plain(retries=2)
    def flaky(x: int) -> ToolReturn[str]:
        ran.append(x)
        if x == 1:
            raise ModelRetry("x must be 2")
        return ToolReturn(return_value=f"x={x}", metadata={"seen": x})

    durable = DurableAgent(agent)
    engine = engine_at(tmp_path, park_wait_s=0)

    @engine.workflow(name="retry")
    async def wf(ctx: durably.AsyncContext) -> Any:
        result = await durable.run("go")
        await ctx.wait_for_signal("go")
        retried = [
            p.content
            for m in result.all_messages()
            for p in m.parts
            if isinstance(p, ToolReturnPart) and p.outcome == "retried"
        ]
        return [result.output, retried]

    try:
        with pytest.raises(durably.RunParked):
            asyncio.run(engine.run_async(wf, run_id="m-1"))
        engine.signal("m-1", "go")
        # The replay raised the recorded ModelRetry again (so the next request's digest
        # matched) and rebuilt the ToolReturn; the tool ran twice in all, live.
        assert asyncio.run(engine.run_async(wf, run_id="m-1")) == ["x=2", ["x must be 2"]]
        assert ran == [1, 2]
    finally:
        engine.close()


def test_the_run_budget_stops_the_agent_at_its_next_step(tmp_path: Path) -> None:
    ran: list[int] = []
    agent: Agent[None, str] = Agent(TestModel(), name="calc")

    @agent.tool_plain
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        ran.append(a + b)
        return a + b

    durable = DurableAgent(agent)
    engine = engine_at(tmp_path)

    @engine.workflow(name="calc")
    async def calc(ctx: durably.AsyncContext) -> str:
        await ctx.budget(tokens=20)
        return (await durable.run("add")).output

    try:
        # The first model turn's tokens pass the budget: the tool's step never starts.
        with pytest.raises(durably.WorkflowFailed, match="BudgetExceeded"):
            asyncio.run(engine.run_async(calc, run_id="b-1"))
        assert ran == [] and engine.spend("b-1").tokens > 20
    finally:
        engine.close()


def test_a_destructive_durably_tool_that_also_requires_approval_asks_once(
    tmp_path: Path,
) -> None:
    @durably.tool(kind="destructive")
    def wipe(disk: str) -> str:
        """Wipe a disk."""
        return f"wiped {disk}"

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("wipe", {"disk": "d1"})])
        return ModelResponse(parts=[TextPart(str(messages[-1].parts[0].content))])

    agent: Agent[None, str] = Agent(FunctionModel(model), name="ops")
    agent.tool_plain(requires_approval=True)(wipe)
    durable = DurableAgent(agent)
    engine = engine_at(tmp_path, park_wait_s=0)

    @engine.workflow(name="ops")
    async def ops(ctx: durably.AsyncContext) -> str:
        return (await durable.run("wipe it")).output

    try:
        with pytest.raises(durably.RunParked):
            asyncio.run(engine.run_async(ops, run_id="w-2"))
        [pending] = engine.pending_approvals()
        engine.approve("w-2", pending.request_id, digest=pending.digest, by="ana")
        assert asyncio.run(engine.run_async(ops, run_id="w-2")) == "wiped d1"
        kinds = [s.name.split(":")[0] for s in engine.history("w-2")]
        assert kinds.count("request_approval") == 1
    finally:
        engine.close()


def test_digests_keep_what_the_model_was_asked_under_a_generated_keys_name() -> None:
    """A tool's argument, a tool's result or a tool's parameter named like a generated
    key (``id``, ``timestamp``, ``metadata``) is what the model was asked: a change to
    it changes the digest (a resume against changed code raises NonDeterminism)."""
    from pydantic_ai.models import ModelRequestParameters
    from pydantic_ai.tools import ToolDefinition

    def asked(arg: int, result: int, id_type: str) -> dict[str, Any]:
        tool = ToolDefinition(
            name="lookup",
            parameters_json_schema={
                "type": "object",
                "properties": {"id": {"type": id_type}},
            },
        )
        messages = [
            ModelRequest(parts=[UserPromptPart("hi")]),
            ModelResponse(parts=[ToolCallPart("lookup", {"id": arg}, tool_call_id="c1")]),
            ModelRequest(parts=[ToolReturnPart("lookup", {"id": result}, tool_call_id="c1")]),
        ]
        return model_request("m", messages, {}, ModelRequestParameters(function_tools=[tool]))

    base = asked(1, 10, "integer")
    assert asked(1, 10, "integer") == base
    assert asked(2, 10, "integer") != base  # the tool call's argument
    assert asked(1, 11, "integer") != base  # the tool's result
    assert asked(1, 10, "string") != base  # the tool's parameter schema
