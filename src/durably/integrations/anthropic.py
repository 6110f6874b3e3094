"""Recorded model calls on the official ``anthropic`` client (``pip install
'durably[anthropic]'``).

``wrap(anthropic.Anthropic(...))`` (or ``AsyncAnthropic``) returns an object with the
client's own interface. Inside a workflow's body ``messages.create`` is a recorded step
named ``anthropic.messages.create`` (``with durably.step_name("plan"):`` names it);
everywhere else, and for every other method, the call passes through to the client. See
docs/integrations.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

try:
    import anthropic as _anthropic
    from anthropic.types import Message
except ImportError as exc:  # pragma: no cover - the extra is not installed
    raise ImportError(
        "durably.integrations.anthropic needs the anthropic package:"
        " pip install 'durably[anthropic]'"
    ) from exc

from . import _anthropic_streams
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

C = TypeVar("C", _anthropic.Anthropic, _anthropic.AsyncAnthropic)


def _tokens(data: Any) -> tuple[int, int]:
    u = data.get("usage") or {}
    ins = sum(
        int(u.get(k) or 0)
        for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    )
    return ins, int(u.get("output_tokens") or 0)


def _message(data: Any, _: Mapping[str, Any]) -> Any:
    return build(Message, data)


PROVIDER = Provider(
    name="anthropic",
    sync_types=(_anthropic.Anthropic,),
    async_types=(_anthropic.AsyncAnthropic,),
    sync_name="anthropic.Anthropic",
    async_name="anthropic.AsyncAnthropic",
    methods={
        ("messages", "create"): Method(
            ("messages", "create"),
            "anthropic.messages.create",
            _message,
            _tokens,
            stream=_anthropic_streams.CREATE,
        ),
        ("messages", "stream"): Method(
            ("messages", "stream"),
            "anthropic.messages.stream",
            _message,
            _tokens,
            stream=_anthropic_streams.STREAM,
            streams_only=True,
        ),
    },
    retryable=(
        _anthropic.RateLimitError,
        _anthropic.InternalServerError,
        _anthropic.APIConnectionError,
    ),
    status_error=_anthropic.APIStatusError,
    sentinels=tuple(
        t for t in (getattr(_anthropic, "NotGiven", None), getattr(_anthropic, "Omit", None)) if t
    ),
)


def wrap(
    client: C,
    prices: Mapping[str, tuple[float, float]] | None = None,
    retries: int = 2,
    timeout_s: float | None = None,
) -> C:
    """``client`` (an ``anthropic.Anthropic`` or ``anthropic.AsyncAnthropic``) with
    ``messages.create`` (streamed or not) and ``messages.stream`` recorded as steps
    inside a workflow; type checkers see the
    client's own type. ``prices``, ``retries`` and ``timeout_s`` as in
    :func:`durably.integrations.openai.wrap` (429, 5xx including 529 overloaded,
    timeouts and dropped connections are retried, honouring ``Retry-After``)."""
    settings = check_settings(prices, retries, timeout_s)
    wrapped: C = wrap_as(PROVIDER, client, settings)
    return wrapped
