"""Human approvals: the digest that binds a decision to one exact action, and the values
the engine and the workflow see.

Pure (no I/O). ``ctx.request_approval(action, args)`` records a request at its position
bound to :func:`approval_digest` of ``[action, args]``; a person (``engine.approve``,
``durably approve``) must name that digest, so approving anything but the action shown
is refused (``ApprovalMismatch``).

The digest has no codec prefix, so any client can recompute it from the listed action
and arguments: sha256 of the UTF-8 bytes of the canonical JSON text of ``[action, args]``
(keys sorted, separators ``,`` and ``:`` with no whitespace, non-ASCII characters as
themselves, not ``\\u`` escapes)::

    import hashlib, json
    text = json.dumps([action, args], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()

The recipe is to be run on the args as listed (``pending_approvals``, ``durably approvals
list --json``), which are the canonical ones: a float with an integral value is written
as an integer (``20.0`` is listed and hashed as ``20``, as JavaScript and Go print it),
and a float Python would print with an exponent (``1e-05``) is refused, since JSON
libraries print those differently. Keys are sorted by Unicode code point (JavaScript's
default sort compares UTF-16 units: they differ only for keys mixing characters past
U+FFFF with ones from U+E000 to U+FFFF). Integers past 2**53 need a client that parses
JSON integers exactly (JavaScript's ``JSON.parse`` does not: pass such ids as strings).

For that to hold, ``args`` must be plain JSON data (dicts with str keys, lists, str,
int, finite float, bool, None): a tuple, a datetime or a dataclass would be encoded with
codec tags no other client knows, so they are refused.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from ._log import LazyLogger
from .errors import ConfigError, SerializationError
from .history import NAME_BYTES_MAX, check_name
from .journal.text import utc_text
from .limits import APPROVAL_ARGS_BYTES_MAX, APPROVAL_DIGEST_PREFIX_MIN, APPROVAL_NOTE_CHARS_MAX
from .limits import APPROVAL_TIMEOUT_S_MAX as APPROVAL_TIMEOUT_S_MAX

__all__ = [
    "APPROVED",
    "EXPIRED",
    "OUTCOMES",
    "REJECTED",
    "ApprovalRequest",
    "ApprovalRow",
    "Decision",
    "PendingApproval",
    "approval_digest",
    "canonical_args",
]

APPROVED: Final = "approved"
REJECTED: Final = "rejected"
EXPIRED: Final = "expired"
OUTCOMES: Final = frozenset({APPROVED, REJECTED, EXPIRED})

# The bounds of a request live in durably.limits (what each bounds and why); these are
# their names in this module.
ARGS_BYTES_MAX: Final = APPROVAL_ARGS_BYTES_MAX
NOTE_CHARS_MAX: Final = APPROVAL_NOTE_CHARS_MAX
DIGEST_PREFIX_MIN: Final = APPROVAL_DIGEST_PREFIX_MIN

APPROVAL_NAME_PREFIX: Final = "request_approval:"
"""Record names of approval requests: ``request_approval:refund``."""

_log = LazyLogger("durably")
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_args(action: str, args: Any) -> str:
    """The canonical JSON text of ``[action, args]`` (what the digest covers); raises
    ``ConfigError`` when ``args`` is not plain JSON data or is too large."""
    args = _plain(args, "args")
    try:
        text = _ENCODER.encode([action, args])
    except (ValueError, TypeError, RecursionError, OverflowError) as exc:
        raise ConfigError(
            f"ctx.request_approval({action!r}, ...): the arguments cannot be encoded as JSON"
            f" ({type(exc).__name__}: {str(exc)[:200]}); pass plain JSON data"
        ) from None
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise ConfigError(
            f"ctx.request_approval({action!r}, ...): the arguments hold a lone UTF-16"
            " surrogate, which cannot be stored; clean the text first"
        ) from None
    if size > ARGS_BYTES_MAX:
        raise ConfigError(
            f"ctx.request_approval({action!r}, ...): {size:,} bytes of arguments, more than"
            f" the {ARGS_BYTES_MAX:,} a request holds; a person has to read them: pass a"
            " summary and a reference (a URL, an id) to the rest"
        )
    return text


def args_json(args: Any) -> str:
    """The canonical JSON text of ``args`` alone (what the approvals row keeps); call it
    after :func:`canonical_args` has checked them."""
    return _ENCODER.encode(_plain(args, "args"))


def approval_digest(action: str, args: Any) -> str:
    """sha256 hex of the canonical JSON of ``[action, args]``, with no codec prefix (see
    the module docstring for the exact bytes)."""
    return hashlib.sha256(canonical_args(action, args).encode("utf-8")).hexdigest()


def _plain(value: Any, where: str, depth: int = 0) -> Any:
    """``value`` as the plain JSON data the digest covers; refuse what is not plain JSON
    data (it would not survive ``json.loads(json.dumps)`` as itself, so another client
    could not recompute the digest from the listed args).

    Numbers are written as every JSON library writes them back: a float with an integral
    value as an integer (``20.0`` as ``20``: JavaScript, Go and others print no ``.0``),
    and a float that Python would print with an exponent (``1e-05``, ``1e+16``; other
    languages print those differently) is refused."""
    if depth > 64:
        raise ConfigError(f"request_approval: {where} is nested more than 64 levels deep")
    t = type(value)
    if value is None or t is str or t is bool or t is int:
        return value
    if t is float:
        if not math.isfinite(value):
            raise ConfigError(
                f"request_approval: {where} is {value!r}, which JSON cannot hold; pass a"
                " finite number or a string"
            )
        if "e" in repr(value):
            raise ConfigError(
                f"request_approval: {where} is {value!r}, a float JSON libraries write in"
                " different forms (1e-05, 0.00001, 1e+16, 10000000000000000), so another"
                " client could not recompute the digest; pass it as a string, or scale it"
                " (cents, not 1e-05 of a unit)"
            )
        return int(value) if value.is_integer() else value
    if t is list:
        return [_plain(v, f"{where}[{i}]", depth + 1) for i, v in enumerate(value)]
    if t is dict:
        out: dict[str, Any] = {}
        for k, v in value.items():
            if type(k) is not str:
                raise ConfigError(
                    f"request_approval: {where} has the key {k!r:.60}; JSON object keys are strings"
                )
            out[k] = _plain(v, f"{where}[{k!r:.60}]", depth + 1)
        return out
    raise ConfigError(
        f"request_approval: {where} is a {t.__module__}.{t.__qualname__}; the arguments of"
        " an approval must be plain JSON data (dict with str keys, list, str, int, float,"
        " bool, None) so that any client can recompute the digest from them: convert it"
        " (a tuple to a list, a datetime to an ISO string, a dataclass to a dict)"
    )


def _given(value: object) -> str:
    """A value passed where a name or option belongs, named by its type or qualified
    name (as ``durably.steps.fn_text`` does; this module sits below it), never quoted:
    the message leaves the process (a partial's repr lists the values bound into it)."""
    if isinstance(value, str):
        return repr(value[:100])
    if callable(value):
        name = getattr(value, "__qualname__", None) or getattr(value, "__name__", None)
        if isinstance(name, str) and name:
            return name
        return f"a {type(value).__qualname__} object"
    return f"a {type(value).__qualname__} value"


def check_action(action: Any) -> str:
    """``action`` if it is a non-empty storable name, else ``ConfigError``."""
    if not isinstance(action, str) or not action:
        raise ConfigError(
            f"ctx.request_approval: the action must be a non-empty str naming what is to be"
            f" approved (e.g. 'refund'), got {_given(action)}"
        )
    check_name(action, "ctx.request_approval: the action")
    return action


def check_text(value: Any, what: str) -> str | None:
    """``by``/``note`` of a decision: None or a str of at most ``NOTE_CHARS_MAX``."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ConfigError(f"{what} must be a str or None, got {value!r:.100}")
    if len(value) > NOTE_CHARS_MAX:
        raise ConfigError(f"{what} is {len(value):,} characters, more than {NOTE_CHARS_MAX:,}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ConfigError(f"{what} holds a lone UTF-16 surrogate; it cannot be stored") from None
    if "\x00" in value:
        raise ConfigError(f"{what} holds a NUL character, which cannot be stored")
    return value


def utc(t: float | None) -> dt.datetime | None:
    """Seconds since the epoch as an aware UTC datetime (None stays None)."""
    return None if t is None else dt.datetime.fromtimestamp(t, dt.UTC)


@dataclass(frozen=True, slots=True)
class Decision:
    """What ``ctx.request_approval`` returns: the recorded outcome of one request.

    ``outcome`` is ``"approved"``, ``"rejected"`` or ``"expired"`` (no decision before
    ``timeout_s``); ``approved`` is True only for ``"approved"``. ``by`` and ``note`` are
    what the person gave (a rejection's reason is its note; None after an expiry).
    ``decided_at`` is when the decision was made (for an expiry: when it expired), an
    aware UTC datetime. ``value`` is the result of the ``on_timeout`` callable after an
    expiry (None otherwise). Replay returns the same Decision.
    """

    outcome: str
    approved: bool
    by: str | None
    note: str | None
    decided_at: dt.datetime
    value: Any = None


@dataclass(frozen=True, slots=True)
class PendingApproval:
    """A request waiting for a person (``engine.pending_approvals()``).

    ``request_id`` is the request's position in its run (a string such as ``"3"``);
    ``digest`` is what ``engine.approve``/``engine.reject`` must name (see
    :func:`approval_digest`); ``requested_at`` and ``expires_at`` (None: no timeout) are
    aware UTC datetimes.
    """

    run_id: str
    request_id: str
    action: str
    args: Any
    digest: str
    requested_at: dt.datetime
    expires_at: dt.datetime | None


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """What the store keeps of a request when the run parks on it (the ``approvals``
    row): ``args`` is its canonical JSON text."""

    request_id: str
    action: str
    args: str
    digest: str
    requested_at: float
    expires_at: float | None


@dataclass(frozen=True, slots=True)
class ApprovalRow:
    """One row of the ``approvals`` table as the store returns it (times in seconds since
    the epoch; ``outcome`` None while pending)."""

    run_id: str
    request_id: str
    action: str
    args: str
    digest: str
    requested_at: float
    expires_at: float | None
    decided_at: float | None
    outcome: str | None
    by: str | None
    note: str | None

    def pending(self) -> PendingApproval:
        """The row as the public :class:`PendingApproval` (args decoded)."""
        try:
            args = json.loads(self.args)
        except ValueError as exc:
            raise SerializationError(
                f"run {self.run_id!r} request {self.request_id}: the stored arguments are not"
                f" JSON ({exc}); the approvals row was edited by hand"
            ) from None
        requested = utc(self.requested_at)
        assert requested is not None
        return PendingApproval(
            self.run_id,
            self.request_id,
            self.action,
            args,
            self.digest,
            requested,
            utc(self.expires_at),
        )

    def shows_its_digest(self) -> bool:
        """Whether the row's action and arguments are what its digest covers (the
        canonical ``[action, args]`` hashes to it): false only after a hand edit, when
        a decision naming the digest would approve something other than what is shown."""
        text = "[" + _ENCODER.encode(self.action) + "," + self.args + "]"
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError:
            return False
        return hashlib.sha256(data).hexdigest() == self.digest

    def decision(self) -> Decision:
        """The row's decision (it must have one)."""
        assert self.outcome is not None and self.decided_at is not None
        decided = utc(self.decided_at)
        assert decided is not None
        return Decision(self.outcome, self.outcome == APPROVED, self.by, self.note, decided)


def check_on_timeout(action: str, timeout_s: Any, on_timeout: Any) -> None:
    """Refuse a ``timeout_s`` or ``on_timeout`` that is not one of the documented ones
    (``ConfigError``: the run is blocked)."""
    if timeout_s is not None and (
        isinstance(timeout_s, bool)
        or not isinstance(timeout_s, (int, float))
        or not 0 <= timeout_s <= APPROVAL_TIMEOUT_S_MAX
    ):
        raise ConfigError(
            f"ctx.request_approval({action!r}): timeout_s must be None (wait for ever) or a"
            f" number of seconds from 0 to {APPROVAL_TIMEOUT_S_MAX:,.0f}, got"
            f" {timeout_s!r:.100}. The run is blocked; fix the code, then resume it."
        )
    step_name = f"on_timeout:{action}"
    if callable(on_timeout) and len(step_name.encode("utf-8")) > NAME_BYTES_MAX:
        # Checked at the request, not at the expiry: the run would wait out its timeout
        # and only then block on a step name too long to record.
        raise ConfigError(
            f"ctx.request_approval({action[:40]!r}...): with an on_timeout function the"
            f" action is also the name of the step {step_name[:40]!r}..., which is"
            f" {len(step_name.encode('utf-8')):,} bytes, more than {NAME_BYTES_MAX}; use a"
            " shorter action. The run is blocked; fix the code, then resume it."
        )
    if on_timeout not in ("reject", "cancel") and not callable(on_timeout):
        raise ConfigError(
            f"ctx.request_approval({action!r}): on_timeout must be 'reject' (an expired"
            " decision), 'cancel' (cancel the run) or a function called with no arguments as"
            f" a recorded step (a safe alternative), got {_given(on_timeout)}. The run is"
            " blocked; fix the code, then resume it."
        )


# -- the history records of a request: pair-checked on the way in and out ----------------


def waiting_json(requested_at: float, expires_at: float | None) -> str:
    """The output of a ``waiting`` approval record."""
    return _ENCODER.encode({"requested_at": requested_at, "expires_at": expires_at})


def waiting_times(output: str | None) -> tuple[float, float | None]:
    """``(requested_at, expires_at)`` of a ``waiting`` record's output
    (``SerializationError`` when damaged)."""
    try:
        out = json.loads(output or "null")
        requested, expires = out["requested_at"], out["expires_at"]
        if not is_time(requested) or not (expires is None or is_time(expires)):
            raise ValueError(f"times {requested!r}, {expires!r}")
        return float(requested), None if expires is None else float(expires)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise SerializationError(f"the recorded request cannot be read ({exc})") from None


def decision_json(row: ApprovalRow) -> str:
    """The output of the ``ok`` record of a decided request."""
    data = {"outcome": row.outcome, "by": row.by, "note": row.note, "decided_at": row.decided_at}
    return _ENCODER.encode(data)


def recorded_decision(output: str | None) -> Decision:
    """The Decision an ``ok`` approval record holds (``SerializationError`` when
    damaged)."""
    try:
        out = json.loads(output or "null")
        outcome, at = out["outcome"], out["decided_at"]
        by, note = out.get("by"), out.get("note")
        if outcome not in OUTCOMES or not is_time(at):
            raise ValueError(f"outcome {outcome!r} at {at!r}")
        if not (by is None or isinstance(by, str)) or not (note is None or isinstance(note, str)):
            raise ValueError("by and note must be strings or null")
        decided = utc(float(at))
        assert decided is not None
        return Decision(outcome, outcome == APPROVED, by, note, decided)
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError, OSError) as exc:
        raise SerializationError(f"the recorded decision cannot be read ({exc})") from None


def pending_list(rows: Iterable[ApprovalRow]) -> list[PendingApproval]:
    """``rows`` as :class:`PendingApproval` (``engine.pending_approvals``), leaving out
    with a warning on the ``durably`` logger a row whose arguments are not JSON (edited
    by hand): one damaged row must not hide every other run's requests."""
    out = []
    for row in rows:
        try:
            out.append(row.pending())
        except SerializationError as exc:
            _log.warning("an approval request is left out of the pending list: %s", exc)
    return out


def is_time(t: Any) -> bool:
    """Whether ``t`` is seconds since the epoch that name a datetime (a hand-edited row
    may hold a bool, NaN, infinity or a year past 9999)."""
    if not isinstance(t, (int, float)) or isinstance(t, bool) or not math.isfinite(t):
        return False
    try:
        dt.datetime.fromtimestamp(t, dt.UTC)
    except (OverflowError, OSError, ValueError):
        return False
    return True


def approval_park_reason(action: str, digest: str, since: float, expires_at: float | None) -> str:
    """How ``runs show``/``runs list`` word a run parked on an approval request."""
    until = "no expiry" if expires_at is None else f"expires at {utc_text(expires_at)}"
    return f"approval {action!r} ({digest[:12]}) since {utc_text(since)} ({until})"
