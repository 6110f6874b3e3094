"""What a wrapped client's recorded call does about failed attempts: the wait before
the next one (``Retry-After``, else exponential), its row in the spend ledger, and the
masking of the request's credentials in a failure's message before it is recorded.
Shared by the recorded calls (:mod:`._common`) and the streamed ones (:mod:`._streams`).
"""

from __future__ import annotations

import contextlib
import email.utils
import time
from collections.abc import Iterator
from typing import Any

# durably's public API only (the import-linter contract in pyproject.toml keeps it so).
from .. import usage as report_usage
from ..redact import MASK, redact

# Request headers whose values are no credential: an error quoting them keeps them.
PLAIN_HEADERS: frozenset[str] = frozenset(
    {
        "accept",
        "accept-encoding",
        "anthropic-version",
        "connection",
        "content-length",
        "content-type",
        "host",
        "user-agent",
    }
)
# A quoted value shorter than this is not masked where it appears on its own (masking
# every "true" would garble the message); credentials are longer.
SECRET_CHARS_MIN = 8

# The longest wait a Retry-After may ask for (seconds); longer ones are cut to it.
RETRY_AFTER_MAX_S = 60.0
# Backoff before retry n (no Retry-After): BACKOFF_S * 2**(n-1), at most BACKOFF_MAX_S.
BACKOFF_S = 0.5
BACKOFF_MAX_S = 8.0


def _sent_secrets(exc: BaseException) -> set[str]:
    """The credentials the failed request carried: the values of its headers (but for
    :data:`PLAIN_HEADERS` and the client's ``x-stainless-*`` facts), the token of an
    ``Authorization`` scheme, and its query parameters' values."""
    request = getattr(exc, "request", None)
    if request is None:
        request = getattr(getattr(exc, "response", None), "request", None)
    found: set[str] = set()
    headers = getattr(request, "headers", None)
    if headers is not None:
        for name, value in headers.items():
            name = str(name).lower()
            if name in PLAIN_HEADERS or name.startswith("x-stainless-"):
                continue
            value = str(value)
            found.add(value)
            scheme, _, token = value.partition(" ")
            if token and scheme.isalpha():
                found.add(token.strip())
    url = getattr(request, "url", None)
    params = getattr(url, "params", None)
    if params is not None:
        found.update(str(v) for _, v in params.multi_items())
    return {f for f in found if len(f) >= SECRET_CHARS_MIN}


def scrub(exc: BaseException, client: Any) -> None:
    """Mask in ``exc``'s message (in place) every credential of the request it failed:
    a server or gateway may quote the ``Authorization`` or ``x-api-key`` header, a
    custom header or a signed query back in its error body, which the client puts in
    the message, and durably records a failed attempt's message (its record, its
    ``step.retried``/``step.failed`` event, ``StepFailed``). The client's own key and a
    URL's password are masked too."""
    secrets = _sent_secrets(exc)
    for attr in ("api_key", "auth_token"):
        value = getattr(client, attr, None)
        if isinstance(value, str) and len(value) >= SECRET_CHARS_MIN:
            secrets.add(value)
    args = exc.args
    if not args or not isinstance(args[0], str):
        return
    text = redact(args[0])
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, MASK)
    if text == args[0]:
        return
    exc.args = (text, *args[1:])
    if isinstance(getattr(exc, "message", None), str):
        exc.message = text  # type: ignore[attr-defined]


def retry_after_s(exc: BaseException) -> float | None:
    """The wait a rate-limit or overload response asks for (``retry-after-ms``,
    ``Retry-After`` in seconds or as an HTTP date), at most ``RETRY_AFTER_MAX_S``."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            return min(RETRY_AFTER_MAX_S, max(0.0, float(ms) / 1000))
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return min(RETRY_AFTER_MAX_S, max(0.0, float(value)))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return min(RETRY_AFTER_MAX_S, max(0.0, when.timestamp() - time.time()))


class Attempts:
    """The wait before a recorded call's next attempt (its previous one failed)."""

    __slots__ = ("delay", "n")

    def __init__(self) -> None:
        self.n = 0
        self.delay = 0.0

    def before_next(self) -> float:
        self.n += 1
        delay, self.delay = self.delay, 0.0
        return delay

    def failed(self, exc: BaseException) -> None:
        # A failed attempt is a call made: it is in the spend ledger (no tokens known).
        report_usage(input_tokens=0, output_tokens=0)
        asked = retry_after_s(exc)
        self.delay = (
            asked if asked is not None else min(BACKOFF_MAX_S, BACKOFF_S * 2 ** (self.n - 1))
        )


@contextlib.contextmanager
def provider_errors(provider: Any, client: Any, state: Attempts) -> Iterator[None]:
    """Around one request to the provider (plain or streamed, sync or async): a failure
    the provider calls retryable is masked (:func:`scrub`) and counted for the next
    attempt's backoff, a status error is masked; both are raised on to the step."""
    try:
        yield
    except provider.retryable as exc:
        scrub(exc, client)
        state.failed(exc)
        raise
    except provider.status_error as exc:
        scrub(exc, client)
        raise
