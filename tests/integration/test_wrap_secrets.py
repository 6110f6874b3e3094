"""A wrapped client's credentials never reach the journal: a server (a gateway, a proxy)
that quotes the request's ``Authorization`` or ``x-api-key`` header back in its error
text fails the step, and what the journal keeps of the error (the step, the run, its
events, what ``durably ui`` shows) has the key masked. The real clients against a local
server; the journal read back as a raw SQLite dump."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

import durably
import durably.integrations.anthropic
import durably.integrations.openai

from .model_servers import ModelServer, Reply

OPENAI_KEY = "sk-proj-0123456789abcdefSECRET"
ANTHROPIC_KEY = "sk-ant-api03-0123456789SECRET"


@pytest.fixture
def echoing() -> Iterator[ModelServer]:
    holder: list[ModelServer] = []

    def script(path: str, body: dict[str, Any]) -> Reply:
        h = holder[0].seen[-1].headers
        said = f"invalid credentials {h.get('authorization')} / {h.get('x-api-key')}"
        return (
            401,
            {},
            {"type": "error", "error": {"type": "authentication_error", "message": said}},
        )

    s = ModelServer(script)
    holder.append(s)
    yield s
    s.close()


def _journal_text(path: Path) -> str:
    con = sqlite3.connect(path)
    try:
        return "\n".join(con.iterdump())
    finally:
        con.close()


def _check(path: Path, engine: durably.Engine, key: str, raised: BaseException) -> None:
    assert key not in str(raised)
    run = engine.get_run("r1")
    assert run.status == "failed"
    text = _journal_text(path)
    assert "invalid credentials" in text  # the error is kept, its key masked
    assert key not in text
    assert key[-12:] not in text


def test_an_openai_key_quoted_back_by_the_server_is_masked(
    tmp_path: Path, echoing: ModelServer
) -> None:
    path = tmp_path / "j.db"
    engine = durably.Engine(f"sqlite:///{path}")
    client = durably.integrations.openai.wrap(
        openai.OpenAI(api_key=OPENAI_KEY, base_url=f"{echoing.url}/v1"), retries=0
    )

    @engine.workflow(name="agent")
    def agent(ctx: durably.Context) -> Any:
        return client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}]
        )

    try:
        with pytest.raises(durably.WorkflowFailed) as info:
            engine.run("agent", run_id="r1")
        _check(path, engine, OPENAI_KEY, info.value)
    finally:
        engine.close()


def test_an_async_openai_key_quoted_back_by_the_server_is_masked(
    tmp_path: Path, echoing: ModelServer
) -> None:
    path = tmp_path / "j.db"
    engine = durably.Engine(f"sqlite:///{path}")
    client = durably.integrations.openai.wrap(
        openai.AsyncOpenAI(api_key=OPENAI_KEY, base_url=f"{echoing.url}/v1"), retries=0
    )

    @engine.workflow(name="agent")
    async def agent(ctx: durably.AsyncContext) -> Any:
        return await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}]
        )

    try:
        with pytest.raises(durably.WorkflowFailed) as info:
            asyncio.run(engine.run_async("agent", run_id="r1"))
        _check(path, engine, OPENAI_KEY, info.value)
    finally:
        engine.close()


def test_an_anthropic_key_quoted_back_by_the_server_is_masked(
    tmp_path: Path, echoing: ModelServer
) -> None:
    path = tmp_path / "j.db"
    engine = durably.Engine(f"sqlite:///{path}")
    client = durably.integrations.anthropic.wrap(
        anthropic.Anthropic(api_key=ANTHROPIC_KEY, base_url=echoing.url), retries=0
    )

    @engine.workflow(name="agent")
    def agent(ctx: durably.Context) -> Any:
        return client.messages.create(
            model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
        )

    try:
        with pytest.raises(durably.WorkflowFailed) as info:
            engine.run("agent", run_id="r1")
        _check(path, engine, ANTHROPIC_KEY, info.value)
    finally:
        engine.close()
