"""Text on its way into the journal: what cannot be stored, and how to make it storable."""

from __future__ import annotations

import datetime as dt

from ..limits import NAME_BYTES_MAX


def storable_text(text: str, chars_max: int) -> str:
    """``text`` cut to ``chars_max`` characters and made valid UTF-8: a lone surrogate
    (model output cut mid-character) becomes its ``\\udcxx`` escape instead of making the
    journal write fail."""
    cut = text[:chars_max]
    if "\x00" in cut:  # PostgreSQL's text refuses NUL (binary tool output in a message)
        cut = cut.replace("\x00", "\\x00")
    if cut.isascii():
        return cut
    return cut.encode("utf-8", "backslashreplace").decode("utf-8")


def describe_error(exc: BaseException) -> str:
    """``str(exc)``, or what can be said when the exception cannot even say that."""
    try:
        return str(exc)
    except Exception as inner:  # a broken __str__ must not lose the failure itself
        return f"<str() of the error raised {type(inner).__name__}>"


def unstorable(text: str) -> str | None:
    """What keeps ``text`` (a run id, queue or name) out of a journal as it is: a NUL
    (PostgreSQL's text refuses it) or a lone surrogate (not UTF-8); None when nothing."""
    if "\x00" in text:
        return "a NUL character"
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return "a lone UTF-16 surrogate"
    return None


def check_text(text: str, what: str) -> None:
    """Raise :class:`ConfigError` when ``text`` cannot be stored (:func:`unstorable`)."""
    bad = unstorable(text)
    if bad is not None:
        from ..errors import ConfigError

        raise ConfigError(
            f"{what} {text[:40]!a} holds {bad}, which a journal cannot store; use printable text"
        )


def check_name(name: str, what: str) -> None:
    """Raise :class:`ConfigError` when ``name`` is longer than :data:`NAME_BYTES_MAX` or
    cannot be stored (:func:`check_text`)."""
    check_text(name, what)
    size = len(name.encode("utf-8", "backslashreplace"))
    if size > NAME_BYTES_MAX:
        from ..errors import ConfigError

        raise ConfigError(
            f"{what} {name[:40]!r}... is {size:,} bytes long, more than NAME_BYTES_MAX"
            f" ({NAME_BYTES_MAX}); use a short fixed name and pass the details as arguments"
        )


def utc_text(t: float) -> str:
    """A time as park reasons, people and logs read it: ``2026-11-30T10:00:00Z`` (UTC,
    seconds). The one form every wait uses, so the waits of one gather read alike."""
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def clock_text(t: float) -> str:
    """A time of day for a sentence (UTC, with the date when it is not today's); a value
    that is no time (a hand-edited row: infinite, NaN, past year 9999) is said as such."""
    try:
        when = dt.datetime.fromtimestamp(t, dt.UTC)
    except (OverflowError, OSError, ValueError):
        return f"{t!r} (not a time: the row was edited)"
    today = dt.datetime.now(dt.UTC).date()
    fmt = "%H:%M:%S UTC" if when.date() == today else "%Y-%m-%d %H:%M:%S UTC"
    return when.strftime(fmt)
