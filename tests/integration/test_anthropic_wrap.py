"""``durably.integrations.anthropic.wrap`` driving the real ``anthropic`` client against a
local server that speaks the Anthropic Messages wire format (it counts requests)."""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from anthropic.types import Message

import durably
from durably.integrations.anthropic import wrap

from .model_servers import ModelServer, Reply, anthropic_message

HERE = Path(__file__).parent


class Crash(BaseException):
    """Stands in for a process death inside one process."""


@pytest.fixture
def server() -> Iterator[ModelServer]:
    s = ModelServer(lambda path, body: (200, {}, anthropic_message("hello")))
    yield s
    s.close()


@pytest.fixture
def engine(journal_url: str) -> Iterator[durably.Engine]:
    e = durably.Engine(journal_url)
    yield e
    e.close()


def _client(server: ModelServer, **kw: Any) -> anthropic.Anthropic:
    return wrap(anthropic.Anthropic(api_key="sk-ant-SECRETKEY", base_url=server.url), **kw)


MESSAGES = [{"role": "user", "content": "Say hello."}]


def test_outside_a_workflow_the_call_passes_through(server: ModelServer) -> None:
    got = _client(server).messages.create(model="claude-test", max_tokens=10, messages=MESSAGES)
    assert isinstance(got, Message) and server.count() == 1


def test_unknown_client_type_is_a_config_error() -> None:
    with pytest.raises(durably.ConfigError, match=r"anthropic\.Anthropic or"):
        wrap(object())  # type: ignore[type-var]


def test_a_recorded_call_replays_as_a_message_and_a_changed_system_prompt_is_named(
    engine: durably.Engine, server: ModelServer
) -> None:
    client = _client(server, prices={"claude-test": (3.0, 15.0)})
    system = ["You are terse."]
    seen: list[Any] = []
    crash = [True]

    def body(ctx: durably.Context) -> str:
        msg = client.messages.create(
            model="claude-test",
            max_tokens=10,
            system=system[0],
            messages=MESSAGES,
            timeout=5.0 if crash[0] else 50.0,
        )
        seen.append(msg)
        if crash[0]:
            raise Crash
        return msg.content[0].text  # type: ignore[union-attr]

    claude = engine.workflow(name="claude")(body)
    with pytest.raises(Crash):
        engine.run(claude, run_id="c")
    crash[0] = False
    assert engine.run(claude, run_id="c") == "hello"  # a changed timeout replays
    assert server.count() == 1
    assert [type(m) for m in seen] == [Message, Message] and seen[0] == seen[1]
    assert [r.name for r in engine.history("c")] == ["anthropic.messages.create"]
    spend = engine.spend("c")
    assert (spend.input_tokens, spend.output_tokens) == (10, 5)
    assert spend.cost_usd == pytest.approx(10 * 3.0 / 1e6 + 5 * 15.0 / 1e6)

    crash[0] = True

    claude2 = engine.workflow(name="claude2")(body)
    with pytest.raises(Crash):
        engine.run(claude2, run_id="c2")
    system[0] = "You are verbose."
    with pytest.raises(durably.NonDeterminism, match="'system'"):
        engine.run(claude2, run_id="c2")
    assert engine.get_run("c2").status == "blocked"


def test_a_529_overloaded_with_retry_after_is_retried_and_both_attempts_are_spend(
    engine: durably.Engine,
) -> None:
    def script(path: str, body: dict[str, Any]) -> Reply:
        if server.count() == 1:
            error = {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}
            return 529, {"retry-after": "1"}, error
        return 200, {}, anthropic_message(input_tokens=40, output_tokens=2)

    server = ModelServer(script)
    try:
        client = _client(server)

        @engine.workflow(name="busy")
        def busy(ctx: durably.Context) -> None:
            client.messages.create(model="claude-test", max_tokens=10, messages=MESSAGES)

        started = time.monotonic()
        engine.run(busy, run_id="b")
        assert time.monotonic() - started >= 1.0
        assert server.count() == 2
        spend = engine.spend("b")
        assert spend.entries == 2 and spend.tokens == 42
    finally:
        server.close()


def test_async_client_records_and_replays(engine: durably.Engine, server: ModelServer) -> None:
    client = wrap(anthropic.AsyncAnthropic(api_key="k", base_url=server.url))
    crash = [True]

    @engine.workflow(name="aclaude")
    async def aclaude(ctx: durably.AsyncContext) -> str:
        msg = await client.messages.create(model="claude-test", max_tokens=10, messages=MESSAGES)
        assert isinstance(msg, Message)
        if crash[0]:
            raise Crash
        return msg.content[0].text  # type: ignore[union-attr]

    with pytest.raises(Crash):
        asyncio.run(engine.run_async(aclaude, run_id="a"))
    crash[0] = False
    assert asyncio.run(engine.run_async(aclaude, run_id="a")) == "hello"
    assert server.count() == 1


def test_a_sync_client_in_an_async_workflow_is_a_config_error(
    engine: durably.Engine, server: ModelServer
) -> None:
    client = _client(server)

    @engine.workflow(name="mixed")
    async def mixed(ctx: durably.AsyncContext) -> None:
        client.messages.create(model="claude-test", max_tokens=10, messages=MESSAGES)

    with pytest.raises(durably.ConfigError, match="AsyncAnthropic"):
        asyncio.run(engine.run_async(mixed, run_id="m"))
    assert engine.get_run("m").status == "blocked"
    assert server.count() == 0


def test_sigkill_between_model_and_tool_resumes_without_a_second_request(
    tmp_path: Path, journal_url: str
) -> None:
    def script(path: str, body: dict[str, Any]) -> Reply:
        last = body["messages"][-1]["content"]
        if isinstance(last, list) and last and last[0].get("type") == "tool_result":
            return 200, {}, anthropic_message("done")
        use = {"id": "toolu_1", "name": "refund", "input": {"order": "A-1"}}
        return 200, {}, anthropic_message("refunding", tool_use=use)

    server = ModelServer(script)
    try:
        world = tmp_path / "world.db"
        cmd = [
            sys.executable,
            str(HERE / "model_agent.py"),
            journal_url,
            server.url,
            str(world),
            "anthropic",
        ]
        first = subprocess.run([*cmd, "--kill"], capture_output=True, text=True, timeout=60)
        assert first.returncode == -signal.SIGKILL, first.stderr
        assert server.count() == 1
        second = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert second.returncode == 0, second.stderr
        assert json.loads(second.stdout) == {"answer": "done"}
        assert server.count() == 2
        keys = [k for (k,) in sqlite3.connect(world).execute("SELECT key FROM refunds")]
        assert len(keys) == 2 and keys[0] == keys[1]
    finally:
        server.close()
