"""The agent loop end to end on the real clients, wrapped (``durably.integrations``),
against a local model server: the model's tool calls go through ``dispatch`` (a bad
argument back to the model as a tool error), a destructive call parks the run for an
approval, and the resume after ``approve`` replays the recorded model call (no second
request), keeps the finished tool results and runs only the approved call."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

import durably
from durably.integrations import anthropic as anthropic_wrap
from durably.integrations import openai as openai_wrap
from durably.tools import dispatch

from .model_servers import ModelServer, Reply, anthropic_message, chat_completion, tool_call

RAN: list[str] = []


@durably.tool(kind="read")
def lookup_order(order_id: str) -> dict[str, Any]:
    """Look an order up by its id."""
    RAN.append(f"lookup {order_id}")
    return {"id": order_id, "total_usd": 40}


@durably.tool(kind="destructive")
def refund_order(order_id: str, amount_usd: float, idempotency_key: str) -> str:
    """Refund an order (a person approves first)."""
    RAN.append(f"refund {order_id} {amount_usd}")
    return f"refunded {amount_usd} USD on {order_id}"


TOOLS = [lookup_order, refund_order]
CALLS = [
    ("c1", "lookup_order", {"order_id": "A-17"}),
    ("c2", "refund_order", {"order_id": "A-17", "amount_usd": "all of it"}),
    ("c3", "refund_order", {"order_id": "A-17", "amount_usd": 40}),
]


def _openai_script(path: str, body: dict[str, Any]) -> Reply:
    if any(m.get("role") == "tool" for m in body["messages"]):
        return 200, {}, chat_completion("Refunded.")
    return 200, {}, chat_completion(None, [tool_call(*c) for c in CALLS])


def _anthropic_script(path: str, body: dict[str, Any]) -> Reply:
    if any(m["role"] == "user" and isinstance(m["content"], list) for m in body["messages"]):
        return 200, {}, anthropic_message("Refunded.")
    msg = anthropic_message("On it.")
    msg["content"] += [{"type": "tool_use", "id": i, "name": n, "input": a} for i, n, a in CALLS]
    msg["stop_reason"] = "tool_use"
    return 200, {}, msg


@pytest.fixture(params=["openai", "anthropic"])
def provider(request: pytest.FixtureRequest) -> Iterator[tuple[str, ModelServer]]:
    script = _openai_script if request.param == "openai" else _anthropic_script
    server = ModelServer(script)
    yield request.param, server
    server.close()


def agent_for(engine: durably.Engine, provider: str, url: str) -> durably.Workflow:
    if provider == "openai":
        client = openai_wrap.wrap(openai.OpenAI(api_key="sk-test", base_url=f"{url}/v1"))

        @engine.workflow(name="support")
        def support(ctx: durably.Context, request: str) -> Any:
            messages: list[Any] = [{"role": "user", "content": request}]
            while True:
                response = client.chat.completions.create(
                    model="gpt-test", messages=messages, tools=[t.openai_schema() for t in TOOLS]
                )
                message = response.choices[0].message
                if not message.tool_calls:
                    return message.content
                messages.append(message.model_dump(exclude_none=True))
                messages += dispatch(ctx, response, TOOLS)

        return support
    claude = anthropic_wrap.wrap(anthropic.Anthropic(api_key="sk-test", base_url=url))

    @engine.workflow(name="support")
    def support_anthropic(ctx: durably.Context, request: str) -> Any:
        messages: list[Any] = [{"role": "user", "content": request}]
        while True:
            response = claude.messages.create(
                model="claude-test",
                max_tokens=100,
                messages=messages,
                tools=[t.anthropic_schema() for t in TOOLS],
            )
            if response.stop_reason != "tool_use":
                return response.content[0].text
            messages.append({"role": "assistant", "content": response.model_dump()["content"]})
            messages += dispatch(ctx, response, TOOLS)

    return support_anthropic


def test_loop_parks_for_approval_and_resumes_without_asking_the_model_again(
    tmp_path: Path, provider: tuple[str, ModelServer]
) -> None:
    name, server = provider
    RAN.clear()
    with durably.Engine(f"sqlite:///{tmp_path}/j.db", park_wait_s=0) as engine:
        wf = agent_for(engine, name, server.url)
        with pytest.raises(durably.RunParked):
            engine.run(wf, "Refund A-17", run_id="s1")
        assert server.count() == 1 and RAN == ["lookup A-17"]
        first = server.seen[0].body
        sent = {t["function"]["name"] if name == "openai" else t["name"] for t in first["tools"]}
        assert sent == {"lookup_order", "refund_order"}
        [p] = engine.pending_approvals()
        assert (p.action, p.args) == ("refund_order", {"order_id": "A-17", "amount_usd": 40})
        engine.approve("s1", p.request_id, digest=p.digest, by="ana")
        assert engine.resume("s1") == "Refunded."
        # One more request: the answer after the tools; the first call was replayed.
        assert server.count() == 2
        assert RAN == ["lookup A-17", "refund A-17 40.0"]
        last = server.seen[1].body["messages"]
        if name == "openai":
            results = [(m["tool_call_id"], m["content"]) for m in last if m["role"] == "tool"]
        else:
            results = [(b["tool_use_id"], b["content"]) for b in last[-1]["content"]]
        assert results[0] == ("c1", '{"id":"A-17","total_usd":40}')
        assert results[1][0] == "c2" and "amount_usd" in results[1][1]
        assert "all of it" not in results[1][1]
        assert results[2] == ("c3", "refunded 40.0 USD on A-17")
