"""Model calls read back as a conversation, for each recorded response shape."""

from __future__ import annotations

import json
from types import SimpleNamespace

from durably.ui.render import conversation, model_call

from .conftest import CHAT

RESPONSE = {
    "id": "resp_1",
    "object": "response",
    "model": "gpt-4.1",
    "output": [
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Checking the weather."}],
        },
        {"type": "function_call", "name": "weather", "arguments": '{"city": "Oslo"}'},
    ],
}
MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-x",
    "content": [
        {"type": "text", "text": "Let me refund that."},
        {"type": "tool_use", "id": "tu_1", "name": "refund", "input": {"amount": 20}},
    ],
}


def _turns(name: str, value: object) -> list[tuple[str, str, str]]:
    call = model_call("0", name, json.dumps(value))
    assert call is not None
    return [(t.role, t.title, t.text) for t in call.turns]


def test_chat_completion() -> None:
    assert _turns("openai.chat.completions.create", CHAT) == [
        ("assistant", "", "I will look the order up."),
        ("tool call", "lookup_order", '{\n  "order": 7\n}'),
    ]


def test_openai_response() -> None:
    assert _turns("openai.responses.create", RESPONSE) == [
        ("assistant", "", "Checking the weather."),
        ("tool call", "weather", '{\n  "city": "Oslo"\n}'),
    ]


def test_anthropic_message() -> None:
    assert _turns("anthropic.messages.create", MESSAGE) == [
        ("assistant", "", "Let me refund that."),
        ("tool call", "refund", '{\n  "amount": 20\n}'),
    ]


def test_not_a_model_call() -> None:
    # A tool's ordinary dict under a tool's name is not a model call.
    assert model_call("0", "lookup", json.dumps({"choices": [1], "type": "message"})) is None
    assert model_call("0", "lookup", json.dumps({"content": [], "type": "message"})) is None
    assert model_call("0", "openai.chat", '"just text"') is None
    assert model_call("0", "openai.chat", "{not json") is None
    assert model_call("0", "anthropic.x", json.dumps({"type": "other"})) is None


def test_invisible_characters_in_model_text_are_shown() -> None:
    msg = {**MESSAGE, "content": [{"type": "text", "text": "pay\u200bme\u202e"}]}
    assert _turns("anthropic.messages.create", msg) == [("assistant", "", "pay<U+200B>me<U+202E>")]


def test_conversation_puts_tool_steps_after_the_call() -> None:
    def rec(position: str, name: str, output: object, status: str = "ok") -> SimpleNamespace:
        return SimpleNamespace(
            position=position,
            name=name,
            kind="step",
            status=status,
            output=json.dumps(output),
            error_type="KeyError" if status == "failed" else None,
            error_message="no such order",
        )

    history = [
        rec("0", "setup", 1),  # before any model call: not part of the conversation
        rec("1", "anthropic.messages.create", MESSAGE),
        rec("2", "refund", {"ok": True}),
        rec("3", "refund", None, status="failed"),
    ]
    turns = [(t.role, t.title, t.position) for t in conversation(history)]
    assert turns == [
        ("model", "claude-x", "1"),
        ("assistant", "", "1"),
        ("tool call", "refund", "1"),
        ("tool result", "refund", "2"),
        ("tool result", "refund", "3"),
    ]
    assert conversation([rec("0", "setup", 1)]) == []


def test_a_renamed_model_call_is_known_by_its_output() -> None:
    # durably.step_name("plan") renames the step; the recorded response says what it is.
    for value in (CHAT, RESPONSE, MESSAGE):
        assert model_call("0", "plan", json.dumps(value)) is not None
