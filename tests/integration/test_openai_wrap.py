"""``durably.integrations.openai.wrap`` driving the real ``openai`` client against a local
server that speaks the OpenAI wire format (it counts requests; no mock of the client)."""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pydantic
import pytest
from openai.types.chat import ChatCompletion
from openai.types.responses import Response

import durably
from durably.integrations import IntegrationWarning, WrapRefused
from durably.integrations.openai import wrap

from .model_servers import ModelServer, Reply, chat_completion, response, tool_call

HERE = Path(__file__).parent


class Crash(BaseException):
    """Stands in for a process death inside one process."""


class City(pydantic.BaseModel):
    name: str
    population: int


def _default(path: str, body: dict[str, Any]) -> Reply:
    if path.endswith("/embeddings"):
        vector = {"object": "embedding", "index": 0, "embedding": [0.1, 0.2]}
        usage = {"prompt_tokens": 1, "total_tokens": 1}
        return 200, {}, {"object": "list", "data": [vector], "model": "e", "usage": usage}
    if path.endswith("/responses"):
        if body.get("text"):  # responses.parse asks for a JSON schema
            return 200, {}, response('{"name": "Oslo", "population": 700000}')
        return 200, {}, response("hi from responses")
    if body.get("response_format"):
        return 200, {}, chat_completion('{"name": "Oslo", "population": 700000}')
    return 200, {}, chat_completion("hello")


@pytest.fixture
def server() -> Iterator[ModelServer]:
    s = ModelServer(_default)
    yield s
    s.close()


@pytest.fixture
def engine(journal_url: str) -> Iterator[durably.Engine]:
    e = durably.Engine(journal_url)
    yield e
    e.close()


def _client(server: ModelServer, **kw: Any) -> openai.OpenAI:
    return wrap(openai.OpenAI(api_key="sk-test-SECRETKEY", base_url=f"{server.url}/v1"), **kw)


def _aclient(server: ModelServer, **kw: Any) -> openai.AsyncOpenAI:
    return wrap(openai.AsyncOpenAI(api_key="sk-test-SECRETKEY", base_url=f"{server.url}/v1"), **kw)


MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Say hello."},
]


def test_outside_a_workflow_the_call_passes_through(server: ModelServer) -> None:
    client = _client(server)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = client.chat.completions.create(model="gpt-test", messages=MESSAGES)
        client.embeddings.create(model="e", input="x")  # no warning outside a workflow
    assert isinstance(got, ChatCompletion)
    assert got.choices[0].message.content == "hello"
    assert server.count("/chat/completions") == 1


def test_unknown_client_type_is_a_config_error() -> None:
    with pytest.raises(durably.ConfigError, match=r"openai\.OpenAI or openai\.AsyncOpenAI"):
        wrap(object())  # type: ignore[type-var]
    with pytest.raises(durably.ConfigError, match="retries"):
        wrap(openai.OpenAI(api_key="x"), retries=-1)
    with pytest.raises(durably.ConfigError, match="prices"):
        wrap(openai.OpenAI(api_key="x"), prices={"m": (1.0,)})  # type: ignore[dict-item]


def test_a_recorded_call_replays_without_a_request(
    engine: durably.Engine, server: ModelServer
) -> None:
    client = _client(server)
    seen: list[Any] = []
    crash = [True]

    @engine.workflow(name="chat")
    def chat(ctx: durably.Context) -> str:
        resp = client.chat.completions.create(model="gpt-test", messages=MESSAGES)
        seen.append(resp)
        if crash[0]:
            raise Crash
        return str(resp.choices[0].message.content)

    with pytest.raises(Crash):
        engine.run(chat, run_id="r1")
    crash[0] = False
    assert engine.run(chat, run_id="r1") == "hello"
    assert server.count("/chat/completions") == 1
    assert [type(s) for s in seen] == [ChatCompletion, ChatCompletion]
    assert seen[0] == seen[1]
    [rec] = engine.history("r1")
    assert rec.name == "openai.chat.completions.create"


def test_parse_returns_the_parsed_type_live_and_on_replay(
    engine: durably.Engine, server: ModelServer
) -> None:
    client = _client(server)
    parsed: list[Any] = []
    crash = [True]

    @engine.workflow(name="parse")
    def parse(ctx: durably.Context) -> int:
        chat = client.chat.completions.parse(
            model="gpt-test", messages=MESSAGES, response_format=City
        )
        resp = client.responses.parse(model="gpt-test", input="Oslo?", text_format=City)
        parsed.extend([chat.choices[0].message.parsed, resp.output_parsed])
        if crash[0]:
            raise Crash
        return chat.choices[0].message.parsed.population  # type: ignore[union-attr]

    with pytest.raises(Crash):
        engine.run(parse, run_id="p1")
    crash[0] = False
    assert engine.run(parse, run_id="p1") == 700000
    assert server.count() == 2
    assert all(isinstance(p, City) for p in parsed) and len(parsed) == 4
    assert [r.name for r in engine.history("p1")] == [
        "openai.chat.completions.parse",
        "openai.responses.parse",
    ]


def test_responses_create_returns_a_response(engine: durably.Engine, server: ModelServer) -> None:
    client = _client(server)

    @engine.workflow(name="resp")
    def resp(ctx: durably.Context) -> str:
        r = client.responses.create(model="gpt-test", input="hi")
        assert isinstance(r, Response)
        return r.output_text

    assert engine.run(resp, run_id="x") == "hi from responses"


def test_a_changed_system_prompt_is_nondeterminism_a_changed_timeout_is_not(
    engine: durably.Engine, server: ModelServer
) -> None:
    client = _client(server)
    system = ["You are terse."]
    timeout = [10.0]
    crash = [True]

    @engine.workflow(name="sys")
    def sys_prompt(ctx: durably.Context) -> str:
        messages = [{"role": "system", "content": system[0]}, MESSAGES[1]]
        resp = client.chat.completions.create(
            model="gpt-test",
            messages=messages,
            timeout=timeout[0],
            extra_headers={"X-Trace": str(timeout[0])},
        )
        if crash[0]:
            raise Crash
        return str(resp.choices[0].message.content)

    with pytest.raises(Crash):
        engine.run(sys_prompt, run_id="s1")
    # A transport option changed: the same call, replayed.
    timeout[0] = 30.0
    with pytest.raises(Crash):
        engine.run(sys_prompt, run_id="s1")
    assert server.count() == 1
    # The system prompt changed: named (which argument, which message), not replayed.
    system[0] = "You are verbose."
    crash[0] = False
    with pytest.raises(durably.NonDeterminism) as err:
        engine.run(sys_prompt, run_id="s1")
    text = str(err.value)
    assert "'messages'" in text and "message 0" in text and "content" in text
    assert "openai.chat.completions.create" in text
    assert engine.get_run("s1").status == "blocked"
    assert server.count() == 1


def test_step_name_names_the_calls_inside_it(engine: durably.Engine, server: ModelServer) -> None:
    client = _client(server)

    @engine.workflow(name="named")
    def named(ctx: durably.Context) -> None:
        with durably.step_name("plan"):
            client.chat.completions.create(model="gpt-test", messages=MESSAGES)
        client.chat.completions.create(model="gpt-test", messages=MESSAGES)

    engine.run(named, run_id="n")
    assert [r.name for r in engine.history("n")] == ["plan", "openai.chat.completions.create"]
    with pytest.raises(durably.ConfigError):
        with durably.step_name(""):
            pass


def test_inside_a_step_the_call_passes_through(engine: durably.Engine, server: ModelServer) -> None:
    client = _client(server)

    def ask() -> str:
        resp = client.chat.completions.create(model="gpt-test", messages=MESSAGES)
        return str(resp.choices[0].message.content)

    @engine.workflow(name="inner")
    def inner(ctx: durably.Context) -> str:
        return ctx.step("ask", ask)

    assert engine.run(inner, run_id="i") == "hello"
    assert [r.name for r in engine.history("i")] == ["ask"]


def test_other_methods_pass_through_with_one_warning(
    engine: durably.Engine, server: ModelServer
) -> None:
    client = _client(server)

    @engine.workflow(name="embed")
    def embed(ctx: durably.Context) -> None:
        client.embeddings.create(model="e", input="x")
        client.embeddings.create(model="e", input="y")

    with pytest.warns(IntegrationWarning, match=r"client\.embeddings\.create") as got:
        engine.run(embed, run_id="e")
    assert len([w for w in got if issubclass(w.category, IntegrationWarning)]) == 1
    assert server.count("/embeddings") == 2
    assert engine.history("e") == []


def test_a_429_with_retry_after_is_retried_and_both_attempts_are_spend(
    engine: durably.Engine,
) -> None:
    def script(path: str, body: dict[str, Any]) -> Reply:
        if server.count() == 1:
            err = {"error": {"message": "slow down", "type": "rate_limit", "code": None}}
            return 429, {"retry-after": "1"}, err
        return 200, {}, chat_completion(prompt_tokens=100, completion_tokens=20)

    server = ModelServer(script)
    try:
        client = _client(server, prices={"gpt-test": (2.0, 10.0)})

        @engine.workflow(name="retry")
        def retry(ctx: durably.Context) -> None:
            client.chat.completions.create(model="gpt-test", messages=MESSAGES)

        started = time.monotonic()
        engine.run(retry, run_id="r")
        assert time.monotonic() - started >= 1.0  # the Retry-After was honoured
        assert server.count() == 2
        spend = engine.spend("r")
        assert spend.entries == 2
        assert (spend.input_tokens, spend.output_tokens) == (100, 20)
        assert spend.cost_usd == pytest.approx(100 * 2.0 / 1e6 + 20 * 10.0 / 1e6)
        [rec] = engine.history("r")
        assert rec.attempts == 2
    finally:
        server.close()


def test_the_clients_own_retries_are_off_inside_a_workflow(engine: durably.Engine) -> None:
    def script(path: str, body: dict[str, Any]) -> Reply:
        return 500, {}, {"error": {"message": "boom", "type": "server_error", "code": None}}

    server = ModelServer(script)
    try:
        client = _client(server, retries=0)

        @engine.workflow(name="down")
        def down(ctx: durably.Context) -> None:
            client.chat.completions.create(model="gpt-test", messages=MESSAGES)

        with pytest.raises(durably.WorkflowFailed, match="InternalServerError"):
            engine.run(down, run_id="d")
        assert server.count() == 1  # the client's default max_retries=2 would make 3
        assert engine.spend("d").entries == 1
    finally:
        server.close()


def test_usage_and_cost_stop_a_run_at_its_budget(
    engine: durably.Engine, server: ModelServer
) -> None:
    client = _client(server, prices={"gpt-test": (1000.0, 1000.0)})  # $0.015 a call

    @engine.workflow(name="spendy", budget=durably.Budget(cost_usd=0.02))
    def spendy(ctx: durably.Context) -> None:
        for _ in range(5):
            client.chat.completions.create(model="gpt-test", messages=MESSAGES)

    with pytest.raises(durably.WorkflowFailed, match="BudgetExceeded"):
        engine.run(spendy, run_id="b")
    assert server.count() == 2  # the second call crossed the budget; the third never ran
    spend = engine.spend("b")
    assert (spend.tokens, spend.input_tokens, spend.output_tokens) == (30, 20, 10)
    assert spend.cost_usd == pytest.approx(0.03)


def test_an_unknown_model_costs_nothing_and_warns_once(
    engine: durably.Engine, server: ModelServer
) -> None:
    client = _client(server, prices={"other": (1.0, 1.0)})

    @engine.workflow(name="unpriced")
    def unpriced(ctx: durably.Context) -> None:
        client.chat.completions.create(model="gpt-unpriced", messages=MESSAGES)
        client.chat.completions.create(model="gpt-unpriced", messages=MESSAGES)

    with pytest.warns(IntegrationWarning, match="no price for model 'gpt-unpriced'") as got:
        engine.run(unpriced, run_id="u")
    assert len([w for w in got if issubclass(w.category, IntegrationWarning)]) == 1
    spend = engine.spend("u")
    assert spend.cost_usd == 0 and spend.tokens == 30


def test_request_headers_and_keys_are_never_recorded(
    engine: durably.Engine, server: ModelServer, journal_url: str
) -> None:
    client = _client(server)

    @engine.workflow(name="secret")
    def secret(ctx: durably.Context) -> None:
        client.chat.completions.create(
            model="gpt-test",
            messages=MESSAGES,
            extra_headers={"Authorization": "Bearer HEADER-SECRET", "api-key": "HEADER-SECRET"},
            extra_query={"k": "QUERY-SECRET"},
        )

    engine.run(secret, run_id="h")
    assert server.seen[0].headers["authorization"] == "Bearer HEADER-SECRET"
    events = repr(engine.events("h").events)
    history = repr(engine.history("h"))
    for text in (events, history):
        assert "SECRET" not in text
    if journal_url.startswith("sqlite"):
        path = journal_url.removeprefix("sqlite:///")
        engine.close()
        raw = Path(path).read_bytes()
        assert b"SECRET" not in raw and b"sk-test" not in raw
        assert b"Say hello." in raw  # the request body is recorded


def _blocked(engine: durably.Engine, run_id: str) -> str:
    run = engine.get_run(run_id)
    assert run.status == "blocked", run.status
    return str(run.park_reason)


def test_stream_true_on_a_method_without_a_streamed_form_is_refused(
    engine: durably.Engine, server: ModelServer
) -> None:
    client = _client(server)

    @engine.workflow(name="stream")
    def stream(ctx: durably.Context) -> None:
        client.chat.completions.parse(model="gpt-test", messages=MESSAGES, stream=True)

    with pytest.raises(durably.ConfigError, match="no streamed form"):
        engine.run(stream, run_id="st")
    assert "stream=True" in _blocked(engine, "st")
    assert server.count() == 0


def test_a_non_json_extra_body_is_refused_and_the_run_blocked(
    engine: durably.Engine, server: ModelServer
) -> None:
    client = _client(server)

    @engine.workflow(name="body")
    def body(ctx: durably.Context) -> None:
        client.chat.completions.create(
            model="gpt-test", messages=MESSAGES, extra_body={"when": object()}
        )

    with pytest.raises(WrapRefused, match="extra_body is not JSON"):
        engine.run(body, run_id="eb")
    assert "chat.completions.create" in _blocked(engine, "eb")
    assert server.count() == 0


def test_a_wrapped_client_as_a_step_argument_blocks_the_run(
    engine: durably.Engine, server: ModelServer
) -> None:
    client = _client(server)

    def ask(c: Any) -> str:
        return "never"

    @engine.workflow(name="arg")
    def arg(ctx: durably.Context) -> str:
        return ctx.step("ask", ask, client)

    with pytest.raises(durably.SerializationError, match=r"WrappedClient.*closure"):
        engine.run(arg, run_id="a")
    assert "closure" in _blocked(engine, "a")


def test_an_unencodable_response_blocks_the_run_and_keeps_its_spend(
    engine: durably.Engine,
) -> None:
    def script(path: str, body: dict[str, Any]) -> Reply:
        return 200, {}, chat_completion("cut \ud800 here")  # a lone surrogate

    server = ModelServer(script)
    try:
        client = _client(server)

        @engine.workflow(name="bad")
        def bad(ctx: durably.Context) -> None:
            client.chat.completions.create(model="gpt-test", messages=MESSAGES)

        with pytest.raises(durably.SerializationError, match="surrogate"):
            engine.run(bad, run_id="bad")
        assert "openai.chat.completions.create" in _blocked(engine, "bad")
        assert engine.spend("bad").tokens == 15  # the call was paid for: it is counted
    finally:
        server.close()


def test_an_unknown_client_wrapped_inside_a_workflow_blocks_the_run(
    engine: durably.Engine,
) -> None:
    @engine.workflow(name="unknown")
    def unknown(ctx: durably.Context) -> None:
        wrap("not a client")  # type: ignore[type-var]

    with pytest.raises(durably.ConfigError, match=r"openai\.OpenAI or openai\.AsyncOpenAI"):
        engine.run(unknown, run_id="uk")
    _blocked(engine, "uk")


# -- async ------------------------------------------------------------------------------


def test_async_client_records_and_replays(engine: durably.Engine, server: ModelServer) -> None:
    client = _aclient(server)
    crash = [True]

    @engine.workflow(name="achat")
    async def achat(ctx: durably.AsyncContext) -> str:
        resp = await client.chat.completions.create(model="gpt-test", messages=MESSAGES)
        assert isinstance(resp, ChatCompletion)
        parsed = await client.chat.completions.parse(
            model="gpt-test", messages=MESSAGES, response_format=City
        )
        city = parsed.choices[0].message.parsed
        assert isinstance(city, City)
        if crash[0]:
            raise Crash
        return f"{resp.choices[0].message.content} {city.name}"

    with pytest.raises(Crash):
        asyncio.run(engine.run_async(achat, run_id="ar"))
    crash[0] = False
    assert asyncio.run(engine.run_async(achat, run_id="ar")) == "hello Oslo"
    assert server.count() == 2


def test_async_429_is_retried_with_retry_after(engine: durably.Engine) -> None:
    def script(path: str, body: dict[str, Any]) -> Reply:
        if server.count() == 1:
            return 429, {"retry-after-ms": "200"}, {"error": {"message": "later"}}
        return 200, {}, chat_completion()

    server = ModelServer(script)
    try:
        client = _aclient(server)

        @engine.workflow(name="aretry")
        async def aretry(ctx: durably.AsyncContext) -> None:
            await client.chat.completions.create(model="gpt-test", messages=MESSAGES)

        started = time.monotonic()
        asyncio.run(engine.run_async(aretry, run_id="ar"))
        assert time.monotonic() - started >= 0.2
        assert server.count() == 2 and engine.spend("ar").entries == 2
    finally:
        server.close()


def test_a_sync_client_in_an_async_workflow_is_a_config_error(
    engine: durably.Engine, server: ModelServer
) -> None:
    client = _client(server)

    @engine.workflow(name="mixed")
    async def mixed(ctx: durably.AsyncContext) -> None:
        client.chat.completions.create(model="gpt-test", messages=MESSAGES)

    with pytest.raises(durably.ConfigError, match="AsyncOpenAI"):
        asyncio.run(engine.run_async(mixed, run_id="m"))
    assert "AsyncOpenAI" in _blocked(engine, "m")
    assert server.count() == 0


# -- a real process killed between the model call and the tool call ------------------


def test_sigkill_between_model_and_tool_resumes_without_a_second_request(
    tmp_path: Path, journal_url: str
) -> None:
    def script(path: str, body: dict[str, Any]) -> Reply:
        if body["messages"][-1]["role"] == "tool":
            return 200, {}, chat_completion("done")
        call = tool_call("call_1", "refund", {"order": "A-1"})
        return 200, {}, chat_completion(None, tool_calls=[call])

    server = ModelServer(script)
    try:
        world = tmp_path / "world.db"
        cmd = [
            sys.executable,
            str(HERE / "model_agent.py"),
            journal_url,
            f"{server.url}/v1",
            str(world),
            "openai",
        ]
        first = subprocess.run([*cmd, "--kill"], capture_output=True, text=True, timeout=60)
        assert first.returncode == -signal.SIGKILL, first.stderr
        assert server.count() == 1
        second = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert second.returncode == 0, second.stderr
        assert json.loads(second.stdout) == {"answer": "done"}
        # The first model call was replayed (one request, not two), the second went live.
        assert server.count() == 2
        keys = [k for (k,) in sqlite3.connect(world).execute("SELECT key FROM refunds")]
        assert len(keys) == 2 and keys[0] == keys[1]  # re-run with the same key
    finally:
        server.close()


def test_a_tool_loop_appending_the_message_objects_replays_exactly(
    engine: durably.Engine,
) -> None:
    def script(path: str, body: dict[str, Any]) -> Reply:
        if body["messages"][-1]["role"] == "tool":
            return 200, {}, chat_completion("done")
        return 200, {}, chat_completion(None, tool_calls=[tool_call("c1", "now", {})])

    server = ModelServer(script)
    try:
        client = _client(server)
        crash = [True]

        @engine.workflow(name="loop")
        def loop(ctx: durably.Context) -> str:
            messages: list[Any] = [{"role": "user", "content": "what time is it?"}]
            while True:
                resp = client.chat.completions.create(model="gpt-test", messages=messages)
                msg = resp.choices[0].message
                messages.append(msg)  # the client's own object, as its docs show
                if not msg.tool_calls:
                    break
                for call in msg.tool_calls:
                    out = ctx.step("tool", lambda: "noon")
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": out})
            if crash[0]:
                raise Crash
            return str(msg.content)

        with pytest.raises(Crash):
            engine.run(loop, run_id="loop")
        crash[0] = False
        assert engine.run(loop, run_id="loop") == "done"
        assert server.count() == 2
    finally:
        server.close()


def test_with_options_keeps_the_client_wrapped_and_keywords_only(
    engine: durably.Engine, server: ModelServer
) -> None:
    client = _client(server).with_options(timeout=5.0)

    @engine.workflow(name="opts")
    def opts(ctx: durably.Context) -> None:
        client.chat.completions.create(model="gpt-test", messages=MESSAGES)

    engine.run(opts, run_id="o")
    assert [r.name for r in engine.history("o")] == ["openai.chat.completions.create"]

    @engine.workflow(name="positional")
    def positional(ctx: durably.Context) -> None:
        client.chat.completions.create(MESSAGES)  # type: ignore[call-overload]

    with pytest.raises(WrapRefused, match="keyword arguments only"):
        engine.run(positional, run_id="pos")
    _blocked(engine, "pos")


def test_gather_branches_record_their_calls_each(
    engine: durably.Engine, server: ModelServer
) -> None:
    client = _aclient(server)

    @engine.workflow(name="fan")
    async def fan(ctx: durably.AsyncContext) -> list[str]:
        replies = await ctx.gather(
            client.chat.completions.create(model="gpt-test", messages=MESSAGES[:1]),
            client.chat.completions.create(model="gpt-test", messages=MESSAGES),
        )
        return [str(r.choices[0].message.content) for r in replies]

    assert asyncio.run(engine.run_async(fan, run_id="f")) == ["hello", "hello"]
    names = [(r.position, r.name) for r in engine.history("f")]
    assert ("0.0.0", "openai.chat.completions.create") in names
    assert ("0.1.0", "openai.chat.completions.create") in names


def test_replay_check_finds_a_changed_system_prompt_without_asking_the_model(
    engine: durably.Engine, server: ModelServer
) -> None:
    from durably.replaycheck import check_run

    client = _client(server)
    system = ["You are terse."]

    @engine.workflow(name="checked")
    def checked(ctx: durably.Context) -> str:
        messages = [{"role": "system", "content": system[0]}, MESSAGES[1]]
        resp = client.chat.completions.create(model="gpt-test", messages=messages)
        return str(resp.choices[0].message.content)

    engine.run(checked, run_id="rc")
    assert check_run(engine, engine.get_run("rc")) is None
    system[0] = "You are verbose."
    finding = check_run(engine, engine.get_run("rc"))
    assert finding is not None and finding.kind == "diverges"
    assert "'messages': message 0" in finding.reason and "'content'" in finding.reason
    assert "verbose" not in finding.reason  # values stay home
    assert server.count() == 1  # replay --check executes nothing


def test_a_crash_after_the_call_returned_still_counts_its_spend(
    engine: durably.Engine, server: ModelServer
) -> None:
    client = _client(server)

    def hook(run_id: str, pos: str, name: str, window: str) -> None:
        if (pos, window) == ("0", "effect"):  # returned, spend committed, not recorded
            raise Crash

    @engine.workflow(name="paid")
    def paid(ctx: durably.Context) -> None:
        client.chat.completions.create(model="gpt-test", messages=MESSAGES)

    engine.fault_hook = hook
    with pytest.raises(Crash):
        engine.run(paid, run_id="paid")
    assert engine.history("paid") == []
    assert engine.spend("paid").entries == 1 and engine.spend("paid").tokens == 15
    engine.fault_hook = None
    engine.run(paid, run_id="paid")
    assert server.count() == 2  # nothing was recorded: the call was made again
    assert engine.spend("paid").entries == 2 and engine.spend("paid").tokens == 30


def test_timeout_s_bounds_one_attempt_and_the_next_one_is_made(engine: durably.Engine) -> None:
    hung = threading.Event()

    def script(path: str, body: dict[str, Any]) -> Reply:
        if server.count() == 1:
            hung.wait(60)  # the first attempt hangs past timeout_s (until the test ends)
        return 200, {}, chat_completion()

    server = ModelServer(script)
    try:
        # 2 s, not 0.5 s: the second attempt must answer within it too, and on a loaded
        # machine a local round trip could take longer than half a second.
        client = _client(server, timeout_s=2.0, retries=1)

        @engine.workflow(name="slow")
        def slow(ctx: durably.Context) -> str:
            resp = client.chat.completions.create(model="gpt-test", messages=MESSAGES)
            return str(resp.choices[0].message.content)

        assert engine.run(slow, run_id="slow") == "hello"
        assert server.count() == 2
        [rec] = engine.history("slow")
        assert rec.attempts == 2
        kinds = [e.kind for e in engine.events("slow").events]
        assert "step.retried" in kinds
    finally:
        hung.set()
        server.close()
