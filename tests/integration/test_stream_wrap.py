"""Streamed model calls through the wrapped clients: the real ``openai`` and
``anthropic`` clients against a local SSE server that holds each stream open between
chunks. The caller iterates as without durably; the assembled message is recorded with
its usage once; a replay hands out a synthetic stream of the same event types without a
request; the run's followers get ``model.delta`` events before the step is recorded."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest
from anthropic.types import RawMessageStreamEvent
from click.testing import CliRunner
from openai.types.chat import ChatCompletionChunk

import durably
from durably.cli import main as cli
from durably.integrations import anthropic as anthropic_wrap
from durably.integrations import openai as openai_wrap

from .sse_servers import SSEServer, Turn

TOOL = ("lookup_order", {"order_id": "A-17", "note": "rush"})
TEXT = "Let me look that order up for you."
MESSAGES = [{"role": "user", "content": "Where is order A-17?"}]


class Crash(BaseException):
    """Stands in for a process death inside one process."""


def _turn(path: str, body: dict[str, Any]) -> Turn:
    return Turn(TEXT, TOOL)


@pytest.fixture
def server() -> Iterator[SSEServer]:
    s = SSEServer(_turn, delay_s=0.002)
    yield s
    s.close()


@pytest.fixture
def engine(journal_url: str) -> Iterator[durably.Engine]:
    e = durably.Engine(journal_url)
    yield e
    e.close()


@pytest.fixture
def lite(tmp_path: Any) -> Iterator[durably.Engine]:
    e = durably.Engine(f"sqlite:///{tmp_path / 'j.db'}")
    yield e
    e.close()


def _oai(server: SSEServer) -> openai.OpenAI:
    return openai_wrap.wrap(openai.OpenAI(api_key="sk-test", base_url=f"{server.url}/v1"))


def _ant(server: SSEServer) -> anthropic.Anthropic:
    return anthropic_wrap.wrap(anthropic.Anthropic(api_key="sk-ant-test", base_url=server.url))


def _chat_text_and_tool(chunks: list[Any]) -> tuple[str, str | None, str]:
    text, name, args = "", None, ""
    for c in chunks:
        for ch in c.choices:
            text += ch.delta.content or ""
            for tc in ch.delta.tool_calls or ():
                name = tc.function.name or name
                args += tc.function.arguments or ""
    return text, name, args


def _deltas(engine: durably.Engine, run_id: str) -> list[durably.Event]:
    engine.store.flush_stream(5)
    return [e for e in engine.events(run_id).events if e.kind.startswith("model.")]


def test_openai_chat_stream_live_then_replayed_without_a_request(
    engine: durably.Engine, server: SSEServer
) -> None:
    client = _oai(server)
    seen: list[list[Any]] = []
    crash = [True]

    @engine.workflow(name="chat")
    def chat(ctx: durably.Context) -> str:
        stream = client.chat.completions.create(
            model="gpt-test",
            messages=MESSAGES,
            stream=True,
            stream_options={"include_usage": True},
        )
        with stream:
            chunks = list(stream)
        seen.append(chunks)
        if crash[0]:
            raise Crash
        return _chat_text_and_tool(chunks)[0]

    with pytest.raises(Crash):
        engine.run(chat, run_id="c1")
    crash[0] = False
    assert engine.run(chat, run_id="c1") == TEXT
    assert server.count("/chat/completions") == 1
    live, replayed = seen
    assert all(isinstance(c, ChatCompletionChunk) for c in live + replayed)
    want = (TEXT, TOOL[0], json.dumps(TOOL[1]))
    assert _chat_text_and_tool(live) == _chat_text_and_tool(replayed) == want
    assert replayed[-1].usage is not None and replayed[-1].usage.prompt_tokens == 11
    [rec] = engine.history("c1")
    assert rec.name == "openai.chat.completions.create"
    spend = engine.spend("c1")
    assert (spend.entries, spend.input_tokens, spend.output_tokens) == (1, 11, 7)
    # Followers got the text and the tool call's fragments, after one restart marker,
    # all before the step's result.
    events = engine.events("c1").events
    kinds = [e.kind for e in events]
    assert kinds.index("model.restart") < kinds.index("model.delta") < kinds.index("step.completed")
    last_delta = max(i for i, k in enumerate(kinds) if k == "model.delta")
    assert last_delta < kinds.index("step.completed")
    deltas = [e.data for e in events if e.kind == "model.delta"]
    assert "".join(d.get("text", "") for d in deltas) == TEXT
    assert "".join(d.get("arguments", "") for d in deltas if "tool" in d) == json.dumps(TOOL[1])
    assert [d["index"] for d in deltas] == list(range(len(deltas)))
    assert kinds.count("model.restart") == 1  # the replay published nothing
    # The step's step.started went ahead of its tokens, and was stored once.
    assert kinds.count("step.started") == 1
    assert kinds.index("step.started") < kinds.index("model.restart")


def test_openai_async_chat_stream(lite: durably.Engine, server: SSEServer) -> None:
    client = openai_wrap.wrap(openai.AsyncOpenAI(api_key="sk-test", base_url=f"{server.url}/v1"))
    seen: list[list[Any]] = []
    crash = [True]

    @lite.workflow(name="achat")
    async def achat(ctx: durably.AsyncContext) -> str:
        stream = await client.chat.completions.create(
            model="gpt-test", messages=MESSAGES, stream=True
        )
        chunks = [c async for c in stream]
        seen.append(chunks)
        if crash[0]:
            raise Crash
        return _chat_text_and_tool(chunks)[0]

    with pytest.raises(Crash):
        asyncio.run(lite.run_async(achat, run_id="a1"))
    crash[0] = False
    assert asyncio.run(lite.run_async(achat, run_id="a1")) == TEXT
    assert server.count() == 1
    assert _chat_text_and_tool(seen[0]) == _chat_text_and_tool(seen[1])
    assert seen[1][-1].usage is None  # no include_usage: no usage chunk, live or replayed
    assert lite.spend("a1").entries == 1  # the call is in the ledger all the same
    assert any(e.kind == "model.delta" for e in _deltas(lite, "a1"))


def test_openai_responses_stream(lite: durably.Engine, server: SSEServer) -> None:
    client = _oai(server)
    seen: list[list[Any]] = []
    crash = [True]

    @lite.workflow(name="resp")
    def resp(ctx: durably.Context) -> str:
        events = list(client.responses.create(model="gpt-test", input="hi", stream=True))
        seen.append(events)
        if crash[0]:
            raise Crash
        return "".join(e.delta for e in events if e.type == "response.output_text.delta")

    with pytest.raises(Crash):
        lite.run(resp, run_id="r1")
    crash[0] = False
    assert lite.run(resp, run_id="r1") == TEXT
    assert server.count("/responses") == 1
    live, replayed = seen
    final_live, final_replayed = live[-1].response, replayed[-1].response
    assert type(final_live) is type(final_replayed)
    assert final_replayed.output_text == final_live.output_text == TEXT
    calls = [o for o in final_replayed.output if o.type == "function_call"]
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [(TOOL[0], TOOL[1])]
    assert {type(e).__name__ for e in replayed} <= {type(e).__name__ for e in live}
    spend = lite.spend("r1")
    assert (spend.entries, spend.input_tokens, spend.output_tokens) == (1, 11, 7)
    deltas = [e.data for e in _deltas(lite, "r1") if e.kind == "model.delta"]
    assert "".join(d.get("text", "") for d in deltas) == TEXT
    assert any(d.get("name") == TOOL[0] for d in deltas)


def _anthropic_text_and_tool(events: list[Any]) -> tuple[str, Any]:
    text, args = "", ""
    for e in events:
        if e.type == "content_block_delta" and e.delta.type == "text_delta":
            text += e.delta.text
        if e.type == "content_block_delta" and e.delta.type == "input_json_delta":
            args += e.delta.partial_json
    return text, json.loads(args) if args else None


def test_anthropic_create_stream(engine: durably.Engine, server: SSEServer) -> None:
    client = _ant(server)
    seen: list[list[Any]] = []
    crash = [True]

    @engine.workflow(name="ant")
    def ant(ctx: durably.Context) -> str:
        stream = client.messages.create(
            model="claude-test", max_tokens=100, messages=MESSAGES, stream=True
        )
        events = list(stream)
        seen.append(events)
        if crash[0]:
            raise Crash
        return _anthropic_text_and_tool(events)[0]

    with pytest.raises(Crash):
        engine.run(ant, run_id="a1")
    crash[0] = False
    assert engine.run(ant, run_id="a1") == TEXT
    assert server.count("/v1/messages") == 1
    live, replayed = seen
    assert _anthropic_text_and_tool(live) == _anthropic_text_and_tool(replayed) == (TEXT, TOOL[1])
    assert replayed[0].type == "message_start"
    assert [e.type for e in replayed][-2:] == ["message_delta", "message_stop"]
    assert all(type(e).__name__.startswith("Raw") for e in replayed)
    for e in replayed:  # the SDK's own union of raw events
        assert isinstance(e, RawMessageStreamEvent.__args__)  # type: ignore[attr-defined]
    spend = engine.spend("a1")
    assert (spend.entries, spend.input_tokens, spend.output_tokens) == (1, 11, 7)
    [rec] = engine.history("a1")
    assert rec.name == "anthropic.messages.create"


def test_anthropic_messages_stream_helper(lite: durably.Engine, server: SSEServer) -> None:
    client = _ant(server)
    seen: list[tuple[str, Any]] = []
    crash = [True]

    @lite.workflow(name="helper")
    def helper(ctx: durably.Context) -> str:
        with client.messages.stream(
            model="claude-test", max_tokens=100, messages=MESSAGES
        ) as stream:
            text = "".join(stream.text_stream)
            final = stream.get_final_message()
        ctx.emit("said", {"chars": len(text)})
        seen.append((text, final))
        if crash[0]:
            raise Crash
        return text

    with pytest.raises(Crash):
        lite.run(helper, run_id="h1")
    crash[0] = False
    assert lite.run(helper, run_id="h1") == TEXT
    assert server.count() == 1
    (t1, m1), (t2, m2) = seen
    assert t1 == t2 == TEXT
    assert type(m1) is type(m2)
    assert m1.content[1].input == m2.content[1].input == TOOL[1]
    assert m2.usage.output_tokens == 7 and m2.stop_reason == "tool_use"
    [rec] = lite.history("h1")
    assert rec.name == "anthropic.messages.stream"
    spend = lite.spend("h1")
    assert (spend.entries, spend.input_tokens, spend.output_tokens) == (1, 11, 7)
    kinds = [e.kind for e in lite.events("h1").events]
    assert kinds.count("user") == 1  # ctx.emit after the stream, once across the replay


def test_anthropic_async_messages_stream(lite: durably.Engine, server: SSEServer) -> None:
    client = anthropic_wrap.wrap(
        anthropic.AsyncAnthropic(api_key="sk-ant-test", base_url=server.url)
    )
    seen: list[Any] = []
    crash = [True]

    @lite.workflow(name="ahelper")
    async def ahelper(ctx: durably.AsyncContext) -> str:
        async with client.messages.stream(
            model="claude-test", max_tokens=100, messages=MESSAGES
        ) as stream:
            text = "".join([t async for t in stream.text_stream])
            final = await stream.get_final_message()
        seen.append(final)
        if crash[0]:
            raise Crash
        return text

    with pytest.raises(Crash):
        asyncio.run(lite.run_async(ahelper, run_id="h2"))
    crash[0] = False
    assert asyncio.run(lite.run_async(ahelper, run_id="h2")) == TEXT
    assert server.count() == 1
    assert seen[0].content[1].input == seen[1].content[1].input == TOOL[1]


def test_a_plain_with_on_the_async_stream_helper_says_to_use_async_with(
    lite: durably.Engine, server: SSEServer
) -> None:
    client = anthropic_wrap.wrap(
        anthropic.AsyncAnthropic(api_key="sk-ant-test", base_url=server.url)
    )

    @lite.workflow(name="plain")
    async def plain(ctx: durably.AsyncContext) -> None:
        with client.messages.stream(  # type: ignore[attr-defined]
            model="claude-test", max_tokens=100, messages=MESSAGES
        ):
            pass

    with pytest.raises(durably.WorkflowFailed, match="entered with `async with`"):
        asyncio.run(lite.run_async(plain, run_id="p"))
    assert server.seen == []  # nothing was asked of the model


def test_emit_inside_the_loop_and_outside_a_workflow(
    lite: durably.Engine, server: SSEServer
) -> None:
    client = _oai(server)

    @lite.workflow(name="emitting")
    def emitting(ctx: durably.Context) -> int:
        n = 0
        for _chunk in client.chat.completions.create(
            model="gpt-test", messages=MESSAGES, stream=True
        ):
            n += 1
            if n == 3:
                ctx.emit("progress", {"chunks": n})
        return n

    n = lite.run(emitting, run_id="e1")
    assert n > 3
    user = [e for e in lite.events("e1").events if e.kind == "user"]
    assert [e.data for e in user] == [{"kind": "progress", "data": {"chunks": 3}}]
    # `durably runs tail --follow` prints the tokens (one event a line, as they come).
    lite.store.flush_stream(5)
    out = CliRunner().invoke(cli, ["runs", "tail", "e1", "--follow", "--json", "--db", lite.url])
    assert out.exit_code == 0, out.output
    lines = [json.loads(line) for line in out.output.splitlines()]
    text = "".join(e["data"].get("text", "") for e in lines if e["kind"] == "model.delta")
    assert text == TEXT
    # Outside a workflow the wrapped client is the client: its own Stream type.
    raw = client.chat.completions.create(model="gpt-test", messages=MESSAGES, stream=True)
    assert isinstance(raw, openai.Stream)
    assert _chat_text_and_tool(list(raw))[0] == TEXT


def test_async_responses_and_anthropic_create_streams(
    lite: durably.Engine, server: SSEServer
) -> None:
    oai = openai_wrap.wrap(openai.AsyncOpenAI(api_key="sk-test", base_url=f"{server.url}/v1"))
    ant = anthropic_wrap.wrap(anthropic.AsyncAnthropic(api_key="sk-ant-test", base_url=server.url))
    seen: list[tuple[str, Any]] = []
    crash = [True]

    @lite.workflow(name="both")
    async def both(ctx: durably.AsyncContext) -> str:
        stream = await oai.responses.create(model="gpt-test", input="hi", stream=True)
        async with stream:
            events = [e async for e in stream]
        raw = await ant.messages.create(
            model="claude-test", max_tokens=100, messages=MESSAGES, stream=True
        )
        got = _anthropic_text_and_tool([e async for e in raw])
        seen.append((events[-1].response.output_text, got))
        if crash[0]:
            raise Crash
        return got[0]

    with pytest.raises(Crash):
        asyncio.run(lite.run_async(both, run_id="b1"))
    crash[0] = False
    assert asyncio.run(lite.run_async(both, run_id="b1")) == TEXT
    assert server.count() == 2
    assert seen[0] == seen[1] == (TEXT, (TEXT, TOOL[1]))
    assert lite.spend("b1").entries == 2


def test_a_stream_stopped_early_records_what_arrived(
    lite: durably.Engine, server: SSEServer
) -> None:
    client = _oai(server)
    seen: list[str] = []
    crash = [True]

    @lite.workflow(name="early")
    def early(ctx: durably.Context) -> str:
        text = ""
        with client.chat.completions.create(
            model="gpt-test", messages=MESSAGES, stream=True
        ) as stream:
            for chunk in stream:
                text += chunk.choices[0].delta.content or ""
                if len(text) >= 8:
                    break
        seen.append(text)
        if crash[0]:
            raise Crash
        return text

    with pytest.raises(Crash):
        lite.run(early, run_id="x1")
    crash[0] = False
    assert lite.run(early, run_id="x1") == seen[0] == TEXT[:8]
    assert server.count() == 1


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_stream_cut_before_its_final_event_is_never_recorded(
    provider: str, lite: durably.Engine
) -> None:
    server = SSEServer(_turn, delay_s=0, cut_after=5)
    try:
        if provider == "openai":
            client: Any = _oai(server)

            def call() -> Any:
                return client.chat.completions.create(
                    model="gpt-test", messages=MESSAGES, stream=True
                )
        else:
            client = _ant(server)

            def call() -> Any:
                return client.messages.create(
                    model="claude-test", max_tokens=10, messages=MESSAGES, stream=True
                )

        @lite.workflow(name="cut")
        def cut(ctx: durably.Context) -> str:
            got = 0
            try:
                for _ in call():
                    got += 1
            except durably.StepFailed as exc:
                return f"{got} {exc.type_name}"
            return "recorded"

        assert lite.run(cut, run_id="cut1") == "5 durably.integrations.StreamCut"
        # Events had reached the caller: no retry (one request), a failure, not a record.
        assert server.count() == 1
        [rec] = lite.history("cut1")
        assert rec.status == "failed" and rec.error_type == "durably.integrations.StreamCut"
        # The attempt's usage counts once (Anthropic's message_start had the input tokens).
        spend = lite.spend("cut1")
        assert (spend.entries, spend.input_tokens) == (1, 11 if provider == "anthropic" else 0)
    finally:
        server.close()


def test_a_stream_cut_before_any_event_reached_the_caller_is_retried(
    lite: durably.Engine,
) -> None:
    server = SSEServer(_turn, delay_s=0, cut_after=0)
    try:
        client = openai_wrap.wrap(
            openai.OpenAI(api_key="sk-test", base_url=f"{server.url}/v1"), retries=1
        )

        @lite.workflow(name="cut0")
        def cut0(ctx: durably.Context) -> str:
            try:
                list(client.chat.completions.create(model="m", messages=MESSAGES, stream=True))
            except durably.StepFailed as exc:
                return exc.type_name
            return "recorded"

        assert lite.run(cut0, run_id="c0") == "durably.integrations.StreamCut"
        assert server.count() == 2  # the first attempt and its one retry
        kinds = [e.kind for e in lite.events("c0").events]
        assert kinds.count("step.retried") == 1
    finally:
        server.close()


def test_the_demo_model_server_streams_to_the_wrapped_clients(lite: durably.Engine) -> None:
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[2] / "examples" / "model_server.py"
    spec = importlib.util.spec_from_file_location("demo_model_server", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.STREAM_GAP_S = 0
    demo = module.ModelServer()
    try:
        oai = openai_wrap.wrap(openai.OpenAI(api_key="sk-test", base_url=f"{demo.url}/v1"))
        ant = anthropic_wrap.wrap(anthropic.Anthropic(api_key="sk-test", base_url=demo.url))
        ask = [{"role": "user", "content": "refund order B-7"}]

        @lite.workflow(name="demo")
        def demo_agent(ctx: durably.Context) -> list[Any]:
            chunks = list(oai.chat.completions.create(model="m", messages=ask, stream=True))
            with ant.messages.stream(model="m", max_tokens=50, messages=ask) as stream:
                text = "".join(stream.text_stream)
                final = stream.get_final_message()
            return [_chat_text_and_tool(chunks)[2], text, final.content[1].input]

        assert lite.run(demo_agent, run_id="demo") == [
            '{"order_id": "B-7"}',
            "Calling lookup_order.",
            {"order_id": "B-7"},
        ]
    finally:
        demo.close()


def test_streamed_calls_in_branches_on_threads(lite: durably.Engine, server: SSEServer) -> None:
    import contextvars
    from concurrent.futures import ThreadPoolExecutor

    client = _oai(server)
    seen: list[list[str]] = []
    crash = [True]

    @lite.workflow(name="threads")
    def threads(ctx: durably.Context) -> list[str]:
        group = ctx.branches(["a", "b"])

        def one(i: int) -> str:
            with group.branch(i):
                stream = client.chat.completions.create(
                    model=f"gpt-{i}", messages=MESSAGES, stream=True
                )
                return _chat_text_and_tool(list(stream))[0]

        with ThreadPoolExecutor(2) as pool:
            jobs = [pool.submit(contextvars.copy_context().run, one, i) for i in range(2)]
            texts = [j.result() for j in jobs]
        seen.append(texts)
        if crash[0]:
            raise Crash
        return texts

    with pytest.raises(Crash):
        lite.run(threads, run_id="t1")
    crash[0] = False
    assert lite.run(threads, run_id="t1") == [TEXT, TEXT]
    assert server.count() == 2 and seen[0] == seen[1]
    events = _deltas(lite, "t1")
    for pos in ("0.0.0", "0.1.0"):
        mine = [e for e in events if e.position == pos]
        assert mine[0].kind == "model.restart"
        assert "".join(e.data.get("text", "") for e in mine) == TEXT


# -- a stream the caller abandons mid-iteration: the record is what it saw ------------


def _text(event: Any) -> str:
    # openai chat chunk, responses event, anthropic raw event
    if hasattr(event, "choices"):
        return "".join(c.delta.content or "" for c in event.choices)
    t = getattr(event, "type", "")
    if t == "response.output_text.delta":
        return str(event.delta)
    if t == "content_block_delta" and getattr(event.delta, "type", "") == "text_delta":
        return str(event.delta.text)
    return ""


def _open_stream(kind: str, server: SSEServer) -> Any:
    if kind == "chat":
        c = openai_wrap.wrap(openai.OpenAI(api_key="sk-test", base_url=f"{server.url}/v1"))
        return c.chat.completions.create(model="gpt-test", messages=MESSAGES, stream=True)
    if kind == "responses":
        c = openai_wrap.wrap(openai.OpenAI(api_key="sk-test", base_url=f"{server.url}/v1"))
        return c.responses.create(model="gpt-test", input="Where is order A-17?", stream=True)
    a = anthropic_wrap.wrap(anthropic.Anthropic(api_key="sk-ant-test", base_url=server.url))
    return a.messages.create(model="claude-test", max_tokens=10, messages=MESSAGES, stream=True)


@pytest.mark.parametrize(
    ("kind", "how"),
    [
        ("responses", "close"),
        ("responses", "next_step"),
        ("responses", "exception"),
        ("chat", "next_step"),
        ("anthropic", "exception"),
    ],
)
def test_abandoned_stream_replays_what_the_caller_saw(
    kind: str, how: str, lite: durably.Engine, server: SSEServer
) -> None:
    seen: list[str] = []
    crash = [True]

    @lite.workflow(name="ab")
    def ab(ctx: durably.Context) -> str:
        text = ""
        stream = _open_stream(kind, server)
        try:
            for event in stream:
                text += _text(event)
                if len(text) >= 8:
                    if how == "exception":
                        raise ValueError("consumer failed")
                    break
        except ValueError:
            pass
        if how == "close":
            stream.close()
        ctx.step("after", lambda: 1)
        seen.append(text)
        if crash[0]:
            raise Crash
        return text

    with pytest.raises(Crash):
        lite.run(ab, run_id="a1")
    crash[0] = False
    assert lite.run(ab, run_id="a1") == seen[0]
    assert seen[0] == seen[1]
    assert server.count() == 1
    # The call was made and paid for: it counts once, with the usage its events carried
    # (Anthropic's message_start has the input tokens), the replay adding nothing.
    spend = lite.spend("a1")
    assert spend.entries == 1
    assert spend.input_tokens == (11 if kind == "anthropic" else 0)


@pytest.mark.parametrize("kind", ["responses", "anthropic"])
def test_abandoned_async_stream_replays_what_the_caller_saw(
    kind: str, lite: durably.Engine, server: SSEServer
) -> None:
    seen: list[str] = []
    crash = [True]

    @lite.workflow(name="aab")
    async def aab(ctx: durably.AsyncContext) -> str:
        text = ""
        if kind == "responses":
            c = openai_wrap.wrap(openai.AsyncOpenAI(api_key="sk-test", base_url=f"{server.url}/v1"))
            stream: Any = await c.responses.create(model="gpt-test", input="Hi", stream=True)
        else:
            a = anthropic_wrap.wrap(
                anthropic.AsyncAnthropic(api_key="sk-ant-test", base_url=server.url)
            )
            stream = await a.messages.create(
                model="claude-test", max_tokens=10, messages=MESSAGES, stream=True
            )
        async for event in stream:
            text += _text(event)
            if len(text) >= 8:
                break
        if kind == "anthropic":
            # Closed here (not left to the next step, whose end of it cannot await the
            # provider's stream: the loop's finalizer closes that one, outside the step).
            await stream.close()
        await ctx.step("after", lambda: 1)
        seen.append(text)
        if crash[0]:
            raise Crash
        return text

    with pytest.raises(Crash):
        asyncio.run(lite.run_async(aab, run_id="a2"))
    crash[0] = False
    assert asyncio.run(lite.run_async(aab, run_id="a2")) == seen[0] == TEXT[:8]
    assert server.count() == 1
    if kind == "anthropic":
        spend = lite.spend("a2")
        assert (spend.entries, spend.input_tokens) == (1, 11)
