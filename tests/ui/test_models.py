"""The run page reads real recorded model calls as the conversation: the official openai
and anthropic clients, wrapped by durably.integrations, talking to local servers that
speak their wire formats."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

import durably
from durably.integrations.anthropic import wrap as wrap_anthropic
from durably.integrations.openai import wrap as wrap_openai
from durably.ui import security_for

from ..integration.model_servers import (
    ModelServer,
    Reply,
    anthropic_message,
    chat_completion,
    tool_call,
)
from .conftest import login, serve


def _script(path: str, body: dict[str, Any]) -> Reply:
    if path.endswith("/messages"):
        use = {"id": "tu_1", "name": "refund", "input": {"order": 7, "amount": 20}}
        return 200, {}, anthropic_message("Refunding order 7.", tool_use=use)
    if body.get("messages", [{}])[-1].get("role") == "tool":
        return 200, {}, chat_completion("It shipped on Monday.")
    call = tool_call("call_1", "lookup_order", {"order": 7})
    return 200, {}, chat_completion(None, tool_calls=[call])


@pytest.fixture
def server() -> Iterator[ModelServer]:
    s = ModelServer(_script)
    yield s
    s.close()


def test_run_page_shows_recorded_model_calls_as_the_conversation(
    journal_url: str, server: ModelServer
) -> None:
    oai = wrap_openai(openai.OpenAI(api_key="sk-test", base_url=f"{server.url}/v1"))
    ant = wrap_anthropic(anthropic.Anthropic(api_key="sk-ant-test", base_url=server.url))
    engine = durably.Engine(journal_url)

    @engine.workflow(name="support")
    def support(ctx: durably.Context) -> str:
        messages: list[dict[str, Any]] = [{"role": "user", "content": "Where is order 7?"}]
        first = oai.chat.completions.create(model="gpt-test", messages=messages)
        call = first.choices[0].message.tool_calls[0]
        found = ctx.step("lookup_order", lambda: {"order": 7, "shipped": "Monday"})
        messages += [
            first.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": str(found)},
        ]
        with durably.step_name("answer"):
            answer = oai.chat.completions.create(model="gpt-test", messages=messages)
        ant.messages.create(
            model="claude-test", max_tokens=100, messages=[{"role": "user", "content": "refund"}]
        )
        return str(answer.choices[0].message.content)

    try:
        assert engine.run("support", run_id="support-1") == "It shipped on Monday."
        security = security_for("127.0.0.1", env={})
        assert security.login_token is not None
        with serve(engine, security) as url:
            client = login(url, security.login_token)
            page = client.get("/run?id=support-1").text
            client.close()
        conv = page.split('<section class="conversation">')[1].split("</section>")[0]
        order = [
            "model · gpt-test",
            "tool call · lookup_order",
            "tool result · lookup_order",
            "It shipped on Monday.",  # the renamed call ("answer"), known by its shape
            "model · claude-test",
            "Refunding order 7.",
            "tool call · refund",
            "&#34;amount&#34;: 20",
        ]
        at = [conv.find(text) for text in order]
        assert -1 not in at, dict(zip(order, at, strict=True))
        assert at == sorted(at)
        assert ">answer</td>" in page and ">openai.chat.completions.create</td>" in page
    finally:
        engine.close()
