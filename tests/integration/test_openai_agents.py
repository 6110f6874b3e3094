"""``durably.integrations.openai_agents`` with the real Agents SDK and ``openai``
client against the scripted model server of ``agents_server.py`` (in this process):
the SDK's behaviour outside a workflow is unchanged, spend and budgets, refusals that
block the run, ``@durably.tool`` kinds through :func:`function_tool`, and digests that
leave out generated ids. The crash tests are in tests/crash/test_agents_crash.py."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents", reason="the OpenAI Agents SDK: pip install 'durably[openai-agents]'")

from agents import (
    Agent,
    ModelSettings,
    OpenAIProvider,
    OpenAIResponsesModel,
    RunConfig,
    Runner,
    SQLiteSession,
    function_tool,
    handoff,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

import durably
from durably.integrations import WrapRefused, openai_agents
from durably.integrations.openai_agents import DurableRunner
from durably.integrations.openai_agents._wire import request_body

from .agents_server import AgentsModelServer

set_tracing_disabled(True)  # no trace export: nothing leaves 127.0.0.1


@pytest.fixture(scope="module")
def server() -> Iterator[AgentsModelServer]:
    srv = AgentsModelServer()
    yield srv
    srv.close()


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[durably.Engine]:
    with durably.Engine(f"sqlite:///{tmp_path / 'journal.db'}") as eng:
        yield eng


CALLS: list[str] = []


@function_tool
def refund(order_id: str, cents: int) -> str:
    """Refund part of an order."""
    info = durably.current_step()
    CALLS.append(info.idempotency_key if info else "outside")
    return f"refunded {cents} cents on {order_id}"


@function_tool(needs_approval=True)
def close_account(user: str) -> str:
    """Close an account (asks a person first)."""
    CALLS.append("close_account")
    return f"closed {user}"


def make_agent(client: AsyncOpenAI, script: str, **kw: Any) -> Agent[Any]:
    return Agent(
        name="support",
        instructions="Help.",
        model=OpenAIResponsesModel(model=script, openai_client=client),
        tools=[refund, close_account],
        **kw,
    )


async def both(server: AgentsModelServer, script: str) -> tuple[Any, Any, int, int]:
    """The same agent through Runner.run and DurableRunner.run, outside a workflow."""
    async with AsyncOpenAI(base_url=server.url, api_key="sk-test-xxxxxxxx") as client:
        agent = make_agent(client, script)
        n0 = server.requests
        plain = await Runner.run(agent, "refund A-1")
        n1 = server.requests
        durable = await DurableRunner.run(agent, "refund A-1")
        return plain, durable, n1 - n0, server.requests - n1


def shape(result: Any) -> list[tuple[str, str]]:
    return [(type(i).__name__, getattr(i.raw_item, "type", "")) for i in result.new_items]


def test_outside_a_workflow_it_is_runner_run(server: AgentsModelServer) -> None:
    CALLS.clear()
    plain, durable, asked_plain, asked_durable = asyncio.run(both(server, "refund"))
    assert durable.final_output == plain.final_output == "done: refunded 500 cents on A-1"
    assert shape(durable) == shape(plain)
    assert asked_durable == asked_plain == 2
    assert CALLS == ["outside", "outside"]  # no step around the tool: no key
    assert type(durable) is type(plain)


def test_outside_a_workflow_interruptions_and_run_state_pass_through(
    server: AgentsModelServer,
) -> None:
    async def go() -> tuple[list[str], list[str], Any, Any]:
        async with AsyncOpenAI(base_url=server.url, api_key="sk-test-xxxxxxxx") as client:
            agent = make_agent(client, "approve")
            plain = await Runner.run(agent, "close bob")
            durable = await DurableRunner.run(agent, "close bob")
            names = [[i.raw_item.name for i in r.interruptions] for r in (plain, durable)]
            finals = []
            for r in (plain, durable):
                state = r.to_state()
                state.approve(r.interruptions[0])
                finals.append(await DurableRunner.run(agent, state))
            return names[0], names[1], finals[0], finals[1]

    CALLS.clear()
    plain_names, durable_names, after_plain, after_durable = asyncio.run(go())
    assert plain_names == durable_names == ["close_account"]
    assert after_plain.final_output == after_durable.final_output == "done: closed bob"
    assert CALLS == ["close_account", "close_account"]


def test_inside_a_step_it_passes_through(engine: durably.Engine, server: AgentsModelServer) -> None:
    """In a running step the whole agent run is that one step (nothing recorded inside)."""

    async def whole_run() -> str:
        async with AsyncOpenAI(base_url=server.url, api_key="sk-test-xxxxxxxx") as client:
            result = await DurableRunner.run(make_agent(client, "refund"), "refund A-1")
            return str(result.final_output)

    @engine.workflow(name="stepped")
    async def stepped(ctx: durably.AsyncContext) -> str:
        answer: str = await ctx.step("agent", whole_run)
        return answer

    assert engine.run(stepped, run_id="s") == "done: refunded 500 cents on A-1"
    assert [s.name for s in engine.history("s")] == ["agent"]


@pytest.mark.parametrize("stream", [False, True], ids=["run", "run_streamed"])
def test_usage_goes_to_the_spend_and_a_budget_stops_the_run(
    engine: durably.Engine, server: AgentsModelServer, stream: bool
) -> None:
    async def run_agent(budget: int | None) -> str:
        async with AsyncOpenAI(base_url=server.url, api_key="sk-test-xxxxxxxx") as client:
            agent = make_agent(client, "refund")
            if not stream:
                result = await DurableRunner.run(agent, "refund A-1")
                return str(result.final_output)
            streamed = DurableRunner.run_streamed(agent, "refund A-1")
            async for _ in streamed.stream_events():
                pass
            return str(streamed.final_output)

    @engine.workflow(name="spend")
    async def spend(ctx: durably.AsyncContext, budget: int | None) -> str:
        if budget is not None:
            await ctx.budget(tokens=budget)
        return await run_agent(budget)

    assert engine.run(spend, None, run_id="free") == "done: refunded 500 cents on A-1"
    s = engine.spend("free")
    assert (s.tokens, s.input_tokens, s.output_tokens, s.entries) == (74, 60, 14, 2)
    before = server.requests
    with pytest.raises(durably.WorkflowFailed, match="BudgetExceeded"):
        engine.run(spend, 30, run_id="capped")
    # The first turn (37 tokens) passed the budget of 30: the next recording call (the
    # tool's step) stopped the run, so no second turn was asked.
    assert server.requests - before == 1
    assert engine.spend("capped").tokens == 37


def test_a_sync_workflow_and_a_session_are_refused_and_the_run_blocked(
    engine: durably.Engine, server: AgentsModelServer, tmp_path: Path
) -> None:
    client = AsyncOpenAI(base_url=server.url, api_key="sk-test-xxxxxxxx")
    agent = make_agent(client, "refund")
    before = server.requests

    @engine.workflow(name="sync")
    def sync(ctx: durably.Context) -> Any:
        return asyncio.run(DurableRunner.run(agent, "refund A-1"))

    with pytest.raises(WrapRefused, match="async workflow"):
        engine.run(sync, run_id="sync")
    assert engine.get_run("sync").status == "blocked"

    @engine.workflow(name="session")
    async def session(ctx: durably.AsyncContext) -> Any:
        store = SQLiteSession("s", str(tmp_path / "session.db"))
        return await DurableRunner.run(agent, "refund A-1", session=store)

    with pytest.raises(WrapRefused, match="session"):
        engine.run(session, run_id="session")
    assert engine.get_run("session").status == "blocked"
    assert server.requests == before  # refused before any model turn
    asyncio.run(client.close())


def test_a_durably_tool_keeps_its_kind(engine: durably.Engine, server: AgentsModelServer) -> None:
    """A @durably.tool write through openai_agents.function_tool: the model never sees
    idempotency_key; in a workflow it gets the step's key (an effect step, its intent
    first); outside one, the SDK's tool call id."""
    keys: list[str] = []

    @durably.tool(kind="write", name="refund")
    def keyed_refund(order_id: str, cents: int, idempotency_key: str) -> str:
        """Refund part of an order."""
        keys.append(idempotency_key)
        return f"refunded {cents} cents on {order_id}"

    tool = openai_agents.function_tool(keyed_refund)
    assert "idempotency_key" not in tool.params_json_schema["properties"]

    async def run_agent() -> str:
        async with AsyncOpenAI(base_url=server.url, api_key="sk-test-xxxxxxxx") as client:
            agent = Agent(
                name="support",
                model=OpenAIResponsesModel(model="refund", openai_client=client),
                tools=[tool],
            )
            result = await DurableRunner.run(agent, "refund A-1")
            return str(result.final_output)

    @engine.workflow(name="kinds")
    async def kinds(ctx: durably.AsyncContext) -> str:
        return await run_agent()

    assert engine.run(kinds, run_id="k") == "done: refunded 500 cents on A-1"
    [inside] = keys
    assert inside.startswith("k:") and inside.endswith(":1.0.0")
    [record] = [s for s in engine.history("k") if s.name == "refund"]
    assert record.position == "1.0.0"
    assert asyncio.run(run_agent()) == "done: refunded 500 cents on A-1"
    assert keys[1].startswith("openai-agents:call_")


def test_digests_leave_out_generated_ids_and_timestamps() -> None:
    def body(items: list[Any], instructions: str = "Help.") -> dict[str, Any]:
        return request_body(
            model="m",
            system_instructions=instructions,
            input=items,
            model_settings=ModelSettings(),
            tools=[refund],
            output_schema=None,
            handoffs=[],
            previous_response_id=None,
            conversation_id=None,
            prompt=None,
        )

    call = {"type": "function_call", "call_id": "c1", "name": "refund", "arguments": "{}"}
    one = body([{"role": "user", "content": "hi"}, {**call, "id": "fc_1", "created_at": 1.0}])
    two = body([{"role": "user", "content": "hi"}, {**call, "id": "fc_2", "status": None}])
    assert one == two
    assert body([{"role": "user", "content": "hi"}, call], "Other.") != one
    # Request headers (credentials) and transport options are never in a step's inputs.
    secret = ModelSettings(extra_headers={"Authorization": "Bearer sk-secret"}, timeout=3.0)
    sent = request_body(
        model="m",
        system_instructions="Help.",
        input=[{"role": "user", "content": "hi"}, call],
        model_settings=secret,
        tools=[refund],
        output_schema=None,
        handoffs=[],
        previous_response_id=None,
        conversation_id=None,
        prompt=None,
    )
    assert sent == body([{"role": "user", "content": "hi"}, call])
    assert "sk-secret" not in repr(sent)
    assert body([{"role": "user", "content": "ho"}, call]) != one


def test_an_approval_in_one_of_parallel_calls_parks_the_run(
    tmp_path: Path, server: AgentsModelServer
) -> None:
    """One turn calls refund and close_account (needs_approval) at once: the run parks
    at the approval; once approved it resumes by replay, the refund under the key it
    had (branch 0) and close_account after its approval (branch 1). A rejection in the
    same place sends the model the SDK's rejection text instead of running the tool."""

    async def run_agent() -> str:
        async with AsyncOpenAI(base_url=server.url, api_key="sk-test-xxxxxxxx") as client:
            result = await DurableRunner.run(make_agent(client, "mixed"), "refund, close")
            return str(result.final_output)

    with durably.Engine(f"sqlite:///{tmp_path / 'journal.db'}", park_wait_s=0) as engine:

        @engine.workflow(name="mixed")
        async def mixed(ctx: durably.AsyncContext) -> str:
            return await run_agent()

        for run_id, decide in (("yes", engine.approve), ("no", engine.reject)):
            CALLS.clear()
            with pytest.raises(durably.RunParked):
                engine.run(mixed, run_id=run_id)
            [request] = engine.pending_approvals()
            assert (request.action, request.request_id) == ("close_account", "1.1.0")
            decide(run_id, request.request_id, digest=request.digest, by="ana")
            answer = engine.run(mixed, run_id=run_id)
            refunds = [k for k in CALLS if k != "close_account"]
            assert refunds and {k.rsplit(":", 1)[1] for k in refunds} == {"1.0.0"}
            assert len(set(refunds)) == 1  # re-run after the park, if at all, same key
            if run_id == "yes":
                assert answer == "done: refunded 500 cents on A-1 | closed bob"
                assert CALLS.count("close_account") == 1
            else:
                assert answer == (
                    "done: refunded 500 cents on A-1 | Tool execution was not approved."
                )
                assert "close_account" not in CALLS


def test_a_handoff_and_a_second_run_replay_in_order(
    engine: durably.Engine, server: AgentsModelServer
) -> None:
    """Two DurableRunner.run calls in one workflow (the second continues the first's
    conversation: its items carry the server's generated ids), the first through a
    Handoff object: a fork at the last model turn replays everything before it (no
    NonDeterminism, no request) and asks the model once."""

    async def conversation() -> list[str]:
        async with AsyncOpenAI(base_url=server.url, api_key="sk-test-xxxxxxxx") as client:
            billing = make_agent(client, "refund").clone(name="billing")
            triage = make_agent(client, "triage", handoffs=[handoff(billing)])
            first = await DurableRunner.run(triage, "refund A-1")
            more = [*first.to_input_list(), {"role": "user", "content": "thanks"}]
            second = await DurableRunner.run(billing, more)
            return [str(first.final_output), str(second.final_output), first.last_agent.name]

    @engine.workflow(name="two")
    async def two(ctx: durably.AsyncContext) -> list[str]:
        return await conversation()

    expected = ["done: refunded 500 cents on A-1"] * 2 + ["billing"]
    assert engine.run(two, run_id="two") == expected
    names = [(s.position, s.name) for s in engine.history("two") if s.kind == "step"]
    assert names == [
        ("0", "openai_agents.model"),  # triage: hands off
        ("1", "openai_agents.model"),  # billing: calls refund
        ("2.0.0", "refund"),
        ("3", "openai_agents.model"),  # billing: the answer
        ("4", "openai_agents.model"),  # the second run
    ]
    before = server.requests
    fork = engine.fork("two", at=4)
    assert engine.resume(fork.run_id) == expected
    assert server.requests - before == 1


def test_a_cancel_while_parked_at_an_approval_ends_the_run_cancelled(
    tmp_path: Path, server: AgentsModelServer
) -> None:
    """durably's Cancelled reaches the workflow as itself through the SDK's tool
    machinery: the run ends cancelled, the tool never ran."""

    async def run_agent() -> str:
        async with AsyncOpenAI(base_url=server.url, api_key="sk-test-xxxxxxxx") as client:
            result = await DurableRunner.run(make_agent(client, "approve"), "close bob")
            return str(result.final_output)

    with durably.Engine(f"sqlite:///{tmp_path / 'journal.db'}", park_wait_s=0) as engine:

        @engine.workflow(name="closing")
        async def closing(ctx: durably.AsyncContext) -> str:
            return await run_agent()

        CALLS.clear()
        with pytest.raises(durably.RunParked):
            engine.run(closing, run_id="c")
        engine.cancel("c", reason="customer changed their mind")
        with pytest.raises(durably.Cancelled):
            engine.run(closing, run_id="c")
        assert engine.get_run("c").status == "cancelled"
        assert CALLS == []


def test_a_model_named_through_the_run_configs_provider_is_recorded(
    engine: durably.Engine, server: AgentsModelServer
) -> None:
    """An agent whose model is a name (resolved by RunConfig(model_provider=...)) gets
    the recorded model too: a second run of the same run id replays (no request)."""

    async def run_agent() -> str:
        async with AsyncOpenAI(base_url=server.url, api_key="sk-test-xxxxxxxx") as client:
            agent = Agent(name="support", model="refund", tools=[refund])
            config = RunConfig(model_provider=OpenAIProvider(openai_client=client))
            result = await DurableRunner.run(agent, "refund A-1", run_config=config)
            return str(result.final_output)

    @engine.workflow(name="named")
    async def named(ctx: durably.AsyncContext) -> str:
        return await run_agent()

    before = server.requests
    assert engine.run(named, run_id="n") == "done: refunded 500 cents on A-1"
    assert server.requests - before == 2
    steps = [s.name for s in engine.history("n") if s.kind == "step"]
    assert steps == ["openai_agents.model", "refund", "openai_agents.model"]
    fork = engine.fork("n", at=2)
    assert engine.resume(fork.run_id) == "done: refunded 500 cents on A-1"
    assert server.requests - before == 3  # the fork replayed turn 1 and the tool


def test_a_failed_turn_is_recorded_without_the_credential_it_quoted(
    engine: durably.Engine, server: AgentsModelServer
) -> None:
    key = "sk-test-credential-1234567890"

    async def run_agent() -> str:
        async with AsyncOpenAI(base_url=server.url, api_key=key, max_retries=0) as client:
            result = await DurableRunner.run(make_agent(client, "leaky"), "hi")
            return str(result.final_output)

    @engine.workflow(name="leaky")
    async def leaky(ctx: durably.AsyncContext) -> str:
        return await run_agent()

    with pytest.raises(durably.WorkflowFailed) as failed:
        engine.run(leaky, run_id="l")
    [turn] = engine.history("l")
    assert turn.status == "failed" and turn.error_type == "openai.BadRequestError"
    assert "bad credential" in str(turn.error_message)
    assert key not in str(turn.error_message) and key not in str(failed.value)


def test_a_streamed_run_parks_at_an_approval_and_resumes_once_approved(
    tmp_path: Path, server: AgentsModelServer
) -> None:
    """The park unwinds through the SDK's background streaming task and its
    stream_events to the workflow; approved, the replay streams the recorded turn
    back and runs the tool once."""

    async def run_agent() -> str:
        async with AsyncOpenAI(base_url=server.url, api_key="sk-test-xxxxxxxx") as client:
            streamed = DurableRunner.run_streamed(make_agent(client, "approve"), "close bob")
            async for _ in streamed.stream_events():
                pass
            return str(streamed.final_output)

    with durably.Engine(f"sqlite:///{tmp_path / 'journal.db'}", park_wait_s=0) as engine:

        @engine.workflow(name="streamed")
        async def streamed(ctx: durably.AsyncContext) -> str:
            return await run_agent()

        CALLS.clear()
        with pytest.raises(durably.RunParked):
            engine.run(streamed, run_id="p")
        [request] = engine.pending_approvals()
        assert request.request_id == "1.0.0" and CALLS == []
        engine.approve("p", request.request_id, digest=request.digest, by="ana")
        before = server.requests
        assert engine.run(streamed, run_id="p") == "done: closed bob"
        assert CALLS == ["close_account"]
        assert server.requests - before == 1  # the last turn only


def test_a_streamed_run_replays_every_turn_after_a_fork(
    engine: durably.Engine, server: AgentsModelServer
) -> None:
    """run_streamed through a handoff and a tool, then a fork at its last turn: each
    earlier turn's digest, computed live from the provider's own stream events and on
    the replay from the synthetic ones, is the same (no NonDeterminism), and the replay
    asks the model once."""

    async def conversation() -> list[str]:
        async with AsyncOpenAI(base_url=server.url, api_key="sk-test-xxxxxxxx") as client:
            billing = make_agent(client, "refund").clone(name="billing")
            triage = make_agent(client, "triage", handoffs=[handoff(billing)])
            streamed = DurableRunner.run_streamed(triage, "refund A-1")
            async for _ in streamed.stream_events():
                pass
            more = [*streamed.to_input_list(), {"role": "user", "content": "thanks"}]
            again = DurableRunner.run_streamed(billing, more)
            async for _ in again.stream_events():
                pass
            return [str(streamed.final_output), str(again.final_output)]

    @engine.workflow(name="two_streamed")
    async def two(ctx: durably.AsyncContext) -> list[str]:
        return await conversation()

    expected = ["done: refunded 500 cents on A-1"] * 2
    assert engine.run(two, run_id="ts") == expected
    turns = [s.position for s in engine.history("ts") if s.name == "openai_agents.model.stream"]
    assert len(turns) == 4
    before = server.requests
    fork = engine.fork("ts", at=int(turns[-1]))
    assert engine.resume(fork.run_id) == expected
    assert server.requests - before == 1
