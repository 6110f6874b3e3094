"""Recorded model calls on the official ``openai`` client (``pip install 'durably[openai]'``).

``wrap(openai.OpenAI(...))`` (or ``AsyncOpenAI``) returns an object with the client's own
interface. Inside a workflow's body ``chat.completions.create``/``parse`` and
``responses.create``/``parse`` are recorded steps named ``openai.chat.completions.create``
and so on (``with durably.step_name("plan"):`` names them); with ``stream=True`` the
caller iterates the provider's chunks as they arrive, the assembled response is
recorded, and a replay hands out a synthetic stream of the same chunk types. Everywhere
else, and for every other method, the call passes through to the client. See
docs/integrations.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

try:
    import openai as _openai
    from openai.types.chat import ChatCompletion, ParsedChatCompletion
    from openai.types.responses import ParsedResponse, Response
except ImportError as exc:  # pragma: no cover - the extra is not installed
    raise ImportError(
        "durably.integrations.openai needs the openai package: pip install 'durably[openai]'"
    ) from exc

from . import _openai_streams
from ._common import (
    IntegrationWarning,
    Method,
    Provider,
    WrappedClient,
    WrapRefused,
    build,
    check_settings,
    wrap_as,
)

__all__ = ["IntegrationWarning", "WrapRefused", "WrappedClient", "wrap"]

C = TypeVar("C", _openai.OpenAI, _openai.AsyncOpenAI)


def _chat_tokens(data: Any) -> tuple[int, int]:
    u = data.get("usage") or {}
    return int(u.get("prompt_tokens") or 0), int(u.get("completion_tokens") or 0)


def _responses_tokens(data: Any) -> tuple[int, int]:
    u = data.get("usage") or {}
    return int(u.get("input_tokens") or 0), int(u.get("output_tokens") or 0)


def _format(kwargs: Mapping[str, Any], key: str) -> Any:
    fmt = kwargs.get(key)
    return fmt if isinstance(fmt, type) else None


def _chat(data: Any, _: Mapping[str, Any]) -> Any:
    return build(ChatCompletion, data)


def _chat_parsed(data: Any, kwargs: Mapping[str, Any]) -> Any:
    return build(ParsedChatCompletion[_format(kwargs, "response_format")], data)  # type: ignore[misc]


def _response(data: Any, _: Mapping[str, Any]) -> Any:
    return build(Response, data)


def _response_parsed(data: Any, kwargs: Mapping[str, Any]) -> Any:
    return build(ParsedResponse[_format(kwargs, "text_format")], data)  # type: ignore[misc]


def _digest_value(key: str, value: Any) -> Any:
    """A pydantic class given as ``response_format``/``text_format`` is digested as its
    name and JSON schema (what the request sends), not as a class."""
    if key in ("response_format", "text_format") and isinstance(value, type):
        schema = getattr(value, "model_json_schema", None)
        return {
            "$class": f"{value.__module__}.{value.__qualname__}",
            "schema": schema() if callable(schema) else None,
        }
    return value


_METHODS = {
    m.path: m
    for m in (
        Method(
            ("chat", "completions", "create"),
            "openai.chat.completions.create",
            _chat,
            _chat_tokens,
            stream=_openai_streams.CHAT,
        ),
        Method(
            ("chat", "completions", "parse"),
            "openai.chat.completions.parse",
            _chat_parsed,
            _chat_tokens,
        ),
        Method(
            ("responses", "create"),
            "openai.responses.create",
            _response,
            _responses_tokens,
            stream=_openai_streams.RESPONSES,
        ),
        Method(
            ("responses", "parse"), "openai.responses.parse", _response_parsed, _responses_tokens
        ),
    )
}

PROVIDER = Provider(
    name="openai",
    sync_types=(_openai.OpenAI,),
    async_types=(_openai.AsyncOpenAI,),
    sync_name="openai.OpenAI",
    async_name="openai.AsyncOpenAI",
    methods=_METHODS,
    retryable=(_openai.RateLimitError, _openai.InternalServerError, _openai.APIConnectionError),
    status_error=_openai.APIStatusError,
    sentinels=tuple(
        t for t in (getattr(_openai, "NotGiven", None), getattr(_openai, "Omit", None)) if t
    ),
    digest_value=_digest_value,
)


def wrap(
    client: C,
    prices: Mapping[str, tuple[float, float]] | None = None,
    retries: int = 2,
    timeout_s: float | None = None,
) -> C:
    """``client`` (an ``openai.OpenAI`` or ``openai.AsyncOpenAI``) with its model calls
    recorded as steps inside a workflow; type checkers see the client's own type.

    ``prices``: ``{model: (usd_per_million_input, usd_per_million_output)}`` for the cost
    in the run's spend (a model not in it costs $0, with one warning per model).
    ``retries``: attempts after the first on a rate limit (429), a server error (5xx), a
    timeout or a dropped connection, honouring ``Retry-After``; the client's own retries
    are off inside a workflow, so every attempt is in the spend ledger. ``timeout_s``
    bounds one attempt (``durably.StepTimeout``, retried). Anything else is a
    ``ConfigError``; so is a client of another type.
    """
    settings = check_settings(prices, retries, timeout_s)
    wrapped: C = wrap_as(PROVIDER, client, settings)
    return wrapped
