"""``durably.tools.dispatch`` on the real ``openai`` and ``anthropic`` response types
(and their ``model_dump()`` dicts): every tool call runs as a recorded step in the
model's order (concurrently through ``ctx.gather`` in an async workflow), a bad
argument, bad JSON, an unknown tool, a failing tool and a rejected approval each come
back as a tool-error message, and a replay runs nothing."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from anthropic.types import Message
from openai.types.chat import ChatCompletion
from openai.types.responses import Response

import durably
from durably.tools import dispatch

RAN: list[tuple[str, Any]] = []


@durably.tool(kind="read")
def lookup(order_id: str) -> dict[str, str]:
    """Look up an order."""
    RAN.append(("lookup", order_id))
    return {"id": order_id, "state": "paid"}


@durably.tool(kind="write")
def refund(order_id: str, cents: int, idempotency_key: str) -> str:
    """Refund part of an order."""
    RAN.append(("refund", idempotency_key))
    return f"refunded {cents}"


@durably.tool(kind="idempotent")
def explode(why: str) -> str:
    """Always fails."""
    raise RuntimeError(f"cannot: {why}")


@durably.tool(kind="destructive")
def close_account(customer: str, idempotency_key: str) -> str:
    """Close a customer's account."""
    RAN.append(("close", customer))
    return "closed"


TOOLS = [lookup, refund, explode, close_account]
CALLS = [
    ("c1", "lookup", {"order_id": "A-1"}),
    ("c2", "refund", {"order_id": "A-1", "cents": "lots"}),  # bad argument
    ("c3", "refund", {"order_id": "A-1", "cents": 250}),
    ("c4", "nope", {}),  # unknown tool
    ("c5", "explode", {"why": "testing"}),  # the tool fails
]


@pytest.fixture(autouse=True)
def _clear() -> None:
    RAN.clear()


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/journal.db"


def chat(calls: list[tuple[str, str, Any]], raw: bool = False) -> ChatCompletion:
    return ChatCompletion.model_validate(
        {
            "id": "x",
            "object": "chat.completion",
            "created": 0,
            "model": "gpt-test",
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
                                "function": {
                                    "name": n,
                                    "arguments": a if raw else json.dumps(a),
                                },
                            }
                            for i, n, a in calls
                        ],
                    },
                }
            ],
        }
    )


def responses(calls: list[tuple[str, str, Any]]) -> Response:
    return Response.model_validate(
        {
            "id": "resp",
            "created_at": 0,
            "model": "gpt-test",
            "object": "response",
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "output": [
                {
                    "type": "message",
                    "id": "m",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": "on it", "annotations": []}],
                },
                *[
                    {
                        "type": "function_call",
                        "id": f"fc_{i}",
                        "call_id": i,
                        "name": n,
                        "arguments": json.dumps(a),
                    }
                    for i, n, a in calls
                ],
            ],
        }
    )


def anthropic(calls: list[tuple[str, str, Any]]) -> Message:
    return Message.model_validate(
        {
            "id": "msg",
            "type": "message",
            "role": "assistant",
            "model": "claude-test",
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 1, "output_tokens": 1},
            "content": [
                {"type": "text", "text": "on it"},
                *[{"type": "tool_use", "id": i, "name": n, "input": a} for i, n, a in calls],
            ],
        }
    )


def run_sync(url: str, response: Any, run_id: str = "r") -> tuple[Any, durably.Engine]:
    engine = durably.Engine(url)

    @engine.workflow(name="agent")
    def agent(ctx: durably.Context) -> Any:
        return dispatch(ctx, response, TOOLS)

    return engine.run(agent, run_id=run_id), engine


def check_texts(texts: list[tuple[str, str, bool]]) -> None:
    (i1, t1, e1), (i2, t2, e2), (i3, t3, e3), (i4, t4, e4), (i5, t5, e5) = texts
    assert [i1, i2, i3, i4, i5] == ["c1", "c2", "c3", "c4", "c5"]
    assert json.loads(t1) == {"id": "A-1", "state": "paid"} and not e1
    assert e2 and "invalid arguments for 'refund'" in t2 and "cents" in t2 and "lots" not in t2
    assert t3 == "refunded 250" and not e3
    assert e4 and "no tool named 'nope'" in t4 and "lookup" in t4
    assert e5 and "RuntimeError" in t5 and "cannot: testing" in t5


@pytest.mark.parametrize("dumped", [False, True])
def test_openai_chat_calls_run_in_order_as_steps(url: str, dumped: bool) -> None:
    response: Any = chat(CALLS)
    if dumped:
        response = response.model_dump()
    out, engine = run_sync(url, response)
    with engine:
        assert all(m["role"] == "tool" for m in out)
        check_texts(
            [(m["tool_call_id"], m["content"], m["content"].startswith("error:")) for m in out]
        )
        steps = [(h.position, h.name) for h in engine.history("r") if h.status in ("ok", "failed")]
        assert steps == [("0", "lookup"), ("1", "refund"), ("2", "explode")]
        assert RAN == [("lookup", "A-1"), ("refund", RAN[1][1])] and RAN[1][1].endswith(":1")
        RAN.clear()
        again, _ = run_sync(url, response)
        assert again == out and RAN == []  # replay: recorded results, nothing runs


def test_openai_responses_shape(url: str) -> None:
    out, engine = run_sync(url, responses(CALLS))
    engine.close()
    assert all(m["type"] == "function_call_output" for m in out)
    check_texts([(m["call_id"], m["output"], m["output"].startswith("error:")) for m in out])


@pytest.mark.parametrize("dumped", [False, True])
def test_anthropic_shape_is_one_user_message_of_tool_results(url: str, dumped: bool) -> None:
    response: Any = anthropic(CALLS)
    out, engine = run_sync(url, response.model_dump() if dumped else response)
    engine.close()
    [msg] = out
    assert msg["role"] == "user"
    blocks = msg["content"]
    assert all(b["type"] == "tool_result" for b in blocks)
    check_texts([(b["tool_use_id"], b["content"], b.get("is_error", False)) for b in blocks])


def test_bad_json_and_no_calls(url: str) -> None:
    out, engine = run_sync(url, chat([("c1", "lookup", "{not json")], raw=True))
    engine.close()
    assert "not valid JSON" in out[0]["content"]
    out, engine = run_sync(url, chat([]), run_id="r2")
    engine.close()
    assert out == []


def test_not_a_response_or_not_a_tool_is_refused_clearly(url: str) -> None:
    with pytest.raises(durably.WorkflowFailed, match="dispatch takes a model response"):
        run_sync(url, {"text": "hi"})
    engine = durably.Engine(url)

    @engine.workflow(name="bad")
    def bad(ctx: durably.Context) -> Any:
        return dispatch(ctx, chat(CALLS), [len])  # type: ignore[list-item]

    with engine, pytest.raises(durably.WorkflowFailed, match=r"@durably\.tool"):
        engine.run(bad, run_id="b")
    other = durably.tool(kind="read", name="lookup")(lambda order_id: None)
    with durably.Engine(url) as engine2:

        @engine2.workflow(name="twice")
        def twice(ctx: durably.Context, same: bool) -> Any:
            tools = [lookup, lookup] if same else [lookup, other]
            return dispatch(ctx, chat(CALLS[:1]), tools)

        with pytest.raises(durably.WorkflowFailed, match="two tools are named 'lookup'"):
            engine2.run(twice, False, run_id="t1")
        assert len(engine2.run(twice, True, run_id="t2")) == 1  # the same tool twice is one


def test_async_dispatch_runs_calls_concurrently_through_gather(url: str) -> None:
    both = asyncio.Event()
    seen: list[str] = []

    @durably.tool(kind="read")
    async def wait_a(x: int) -> int:
        """A."""
        seen.append("a")
        await asyncio.wait_for(both.wait(), 5)  # finishes only if b runs meanwhile
        return x

    @durably.tool(kind="read")
    async def wait_b(x: int) -> int:
        """B."""
        seen.append("b")
        both.set()
        return x * 10

    with durably.Engine(url) as engine:

        @engine.workflow(name="agent")
        async def agent(ctx: durably.AsyncContext) -> Any:
            response = anthropic(
                [("u1", "wait_a", {"x": 1}), ("u2", "nope", {}), ("u3", "wait_b", {"x": 2})]
            )
            return await dispatch(ctx, response, [wait_a, wait_b])

        [msg] = asyncio.run(engine.run_async(agent, run_id="a"))
        assert [(b["tool_use_id"], b["content"]) for b in msg["content"]][::2] == [
            ("u1", "1"),
            ("u3", "20"),
        ]
        assert msg["content"][1]["is_error"] is True
        steps = [(h.position, h.name) for h in engine.history("a") if h.status == "ok"]
        assert ("0.0.0", "wait_a") in steps and ("0.1.0", "wait_b") in steps
        seen.clear()
        assert asyncio.run(engine.run_async(agent, run_id="a")) == [msg]
        assert seen == []


def test_rejected_destructive_call_is_a_tool_error_for_the_model(url: str) -> None:
    with durably.Engine(url, park_wait_s=0) as engine:

        @engine.workflow(name="agent")
        def agent(ctx: durably.Context) -> Any:
            return dispatch(ctx, chat([("c1", "close_account", {"customer": "ana"})]), TOOLS)

        with pytest.raises(durably.RunParked):
            engine.run(agent, run_id="r")
        [p] = engine.pending_approvals()
        assert (p.action, p.args) == ("close_account", {"customer": "ana"})
        engine.reject("r", p.request_id, digest=p.digest, by="bo", reason="no")
        [m] = engine.resume("r")
        assert m["content"].startswith("error:") and "rejected by bo" in m["content"]
        assert RAN == []


def test_async_dispatch_parks_for_a_destructive_call_and_runs_it_once_approved(url: str) -> None:
    """The approval of a destructive call in a gather branch parks the run; the other
    calls' results are kept, and after the approval only the destructive call runs."""
    with durably.Engine(url, park_wait_s=0) as engine:

        @engine.workflow(name="agent")
        async def agent(ctx: durably.AsyncContext) -> Any:
            response = chat(
                [
                    ("c1", "lookup", {"order_id": "A-9"}),
                    ("c2", "close_account", {"customer": "ana"}),
                ]
            )
            return await dispatch(ctx, response, TOOLS)

        with pytest.raises(durably.RunParked):
            asyncio.run(engine.run_async(agent, run_id="p"))
        assert RAN == [("lookup", "A-9")]
        [p] = engine.pending_approvals()
        assert (p.action, p.args, p.request_id) == ("close_account", {"customer": "ana"}, "0.1.0")
        engine.approve("p", p.request_id, digest=p.digest, by="ana")
        out = asyncio.run(engine.run_async(agent, run_id="p"))
        assert [m["content"] for m in out] == ['{"id":"A-9","state":"paid"}', "closed"]
        assert RAN == [("lookup", "A-9"), ("close", "ana")]
