"""The idempotency key store: the first request with a key runs, retries get its outcome.

Semantics follow Stripe's idempotent requests and the IETF Idempotency-Key draft:

* the first request with a key runs, and its outcome (a result, or an error the caller
  classed as the client's) is stored with the request's fingerprint;
* the same key with the same fingerprint returns the stored outcome and runs nothing;
* the same key with another fingerprint raises :class:`durably.errors.IdempotencyKeyReused`;
* a request while the first is still running raises
  :class:`durably.errors.IdempotencyKeyInFlight`;
* server errors are not stored (by default), so a retry can finish the work;
* keys expire ``ttl_s`` after their outcome was stored, and are purged.

A running request holds its key under a lease that a background heartbeat renews, so a
process that dies mid-request blocks the key for at most ``lease_s`` seconds, while a live
one keeps it however long its work takes.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import json
import math
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from durably._fork import reset_after_fork
from durably.errors import (
    ConfigError,
    DurablyError,
    IdempotencyKeyInFlight,
    IdempotencyKeyReused,
    SerializationError,
)
from durably.idempotency._db import Database, Row, Tx, open_database
from durably.idempotency._skew import CLOCK_CHECK_S_DEFAULT, SkewCheck

KEY_CHARS_MAX = 255
FINGERPRINT_CHARS_MAX = 1024
RESULT_BYTES_MAX_DEFAULT = 1024 * 1024
TTL_S_DEFAULT = 24 * 3600.0
LEASE_S_DEFAULT = 30.0
_SQL = "idempotency.sql"
_CLAIM_ROUNDS_MAX = 3


class InvalidIdempotencyKey(ConfigError, ValueError):
    """An idempotency key (or scope) is empty, too long, or holds control characters."""


class IdempotencyLeaseLost(DurablyError):
    """A running request lost its key's lease, so its outcome could not be stored."""


class ClientError(DurablyError):
    """Raise from an idempotent function to record a final failure caused by the request.

    The store keeps it as the key's outcome, so a retry with the same key gets the same
    failure (as :class:`RequestFailed`) instead of running again, just as a stored result
    is returned instead of running again. ``data`` must be JSON.
    """

    def __init__(self, message: str, *, data: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.data = data


class RequestFailed(DurablyError):
    """The request behind an idempotency key failed with a stored error, live or replayed.

    ``type_name``, ``message`` and ``data`` describe the stored error; when it was raised
    in this call, ``__cause__`` is the original exception.
    """

    def __init__(self, key: str, type_name: str, message: str, data: Any) -> None:
        self.key = key
        self.type_name = type_name
        self.message = message
        self.data = data
        super().__init__(
            f"the request with idempotency key {key!r} failed: {type_name}: {message} (this"
            " outcome is stored; retrying with the same key returns it again, so fix the"
            " request and send it with a new key)"
        )


@dataclass(frozen=True)
class StoredError:
    """An error outcome as stored: the exception's type name, message and JSON data."""

    type_name: str
    message: str
    data: Any = None


@dataclass(frozen=True)
class IdempotencyRecord:
    """The stored outcome of the request behind one key.

    Times are epoch seconds from the store's clock. ``expires_at`` is when the key may be
    reused for a new request; ``attempts`` counts how often the work was started (more than
    one only after a lease ran out); ``replayed`` is True when this call ran nothing.
    """

    scope: str
    key: str
    fingerprint: str
    ok: bool
    result: Any
    error: StoredError | None
    replayed: bool
    created_at: float
    completed_at: float
    expires_at: float
    attempts: int
    exception: BaseException | None = field(default=None, repr=False, compare=False)

    def value(self) -> Any:
        """Return the stored result, or raise :class:`RequestFailed` for a stored error."""
        if self.ok:
            return self.result
        assert self.error is not None, "a failed record always carries its error"
        err = RequestFailed(self.key, self.error.type_name, self.error.message, self.error.data)
        raise err from self.exception


@dataclass
class Claim:
    """This process's hold on a key whose request it is now running.

    Pass it to :meth:`IdempotencyStore.complete` with the outcome, or to
    :meth:`IdempotencyStore.release` when the work failed and a retry should run it again.
    ``lost`` turns True when the heartbeat finds that another request took the key over.
    """

    scope: str
    key: str
    fingerprint: str
    token: str
    attempts: int
    lost: bool = False


def fingerprint_of(*parts: Any) -> str:
    """Return the sha256 hex digest of the canonical JSON of ``parts``.

    Use it to fingerprint a request from the values that define it (for example the
    operation's name and its arguments); equal values always give equal fingerprints.
    """
    return hashlib.sha256(canonical_json(list(parts)).encode("utf-8")).hexdigest()


def canonical_json(value: Any) -> str:
    """Encode ``value`` as JSON with sorted keys and no whitespace; no pickle, no NaN."""
    try:
        return json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
    except (TypeError, ValueError) as exc:
        raise SerializationError(
            f"value cannot be stored as JSON ({exc}); return dicts, lists, strings, numbers,"
            " booleans or None (convert other objects, e.g. with .model_dump() or .isoformat())"
        ) from exc


def check_key(key: object, what: str = "idempotency key", *, allow_empty: bool = False) -> str:
    """Return ``key`` if it is a usable key, else raise :class:`InvalidIdempotencyKey`."""
    if not isinstance(key, str):
        raise InvalidIdempotencyKey(f"{what} must be a string, got {type(key).__name__}")
    if not key and not allow_empty:
        raise InvalidIdempotencyKey(
            f"{what} is empty; send a unique value per request, for example a UUID"
        )
    if len(key) > KEY_CHARS_MAX:
        raise InvalidIdempotencyKey(
            f"{what} is {len(key)} characters long; the limit is {KEY_CHARS_MAX} (a UUID or a"
            " hash of the request's identity fits easily)"
        )
    if any(ord(c) < 32 or ord(c) == 127 for c in key):
        raise InvalidIdempotencyKey(f"{what} {key!r} contains control characters; remove them")
    return key


class _Heartbeat:
    """One daemon thread that renews the leases of every claim this store holds.

    A shared thread (rather than one per request) keeps the cost flat under load; it runs
    in real time because it must keep leases alive in real time, whatever the clock says.
    """

    def __init__(self, store: IdempotencyStore, interval_s: float) -> None:
        self._store = store
        self._interval_s = interval_s
        self._claims: dict[str, Claim] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        reset_after_fork(self)

    def _after_fork_in_child(self) -> None:
        """The parent's claims are not the child's to renew (renewing them from here would
        keep a dead parent's keys blocked), and its thread does not exist in the child:
        start afresh, with new locks."""
        self._claims = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = None

    def add(self, claim: Claim) -> None:
        with self._lock:
            self._claims[claim.token] = claim
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="durably-idempotency-heartbeat", daemon=True
                )
                self._thread.start()

    def remove(self, claim: Claim) -> None:
        with self._lock:
            self._claims.pop(claim.token, None)

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            with self._lock:
                claims = list(self._claims.values())
            for claim in claims:
                try:
                    if not self._store.renew(claim):
                        self.remove(claim)
                except Exception:
                    # A database hiccup must not kill the heartbeat; the next round retries
                    # and the lease leaves room for a couple of missed rounds.
                    continue

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=5)


class IdempotencyStore:
    """Stores request outcomes by idempotency key on SQLite or PostgreSQL.

    ``url`` is ``sqlite:///path.db`` or ``postgresql://user@host/db``. ``ttl_s`` is how long
    an outcome is kept (and a key refused for other requests) after it was stored.
    ``lease_s`` bounds how long a request that died mid-way blocks its key; a live request
    keeps its lease renewed by a heartbeat every ``lease_s / 3`` seconds. ``client_errors``
    are the exception types stored as outcomes; other exceptions are server errors that are
    not stored unless ``store_server_errors`` is set (see docs/idempotency.md for the
    trade-off). ``clock`` returns epoch seconds and is injectable for tests. On SQLite,
    ``busy_timeout_s`` (default 5 s) and ``synchronous`` (default ``"FULL"``); on
    PostgreSQL, ``pool_size`` (default 10): an option of the other database is refused
    (``ConfigError``), never ignored. On PostgreSQL the store compares ``clock`` with the
    database's at start and every ``clock_check_s`` real seconds: past 2 s
    (``durably.limits.CLOCK_SKEW_WARN_S``) it logs a warning, and while this host runs
    ahead past that bound it judges leases and expiry on the database's clock, so it never
    takes over a request whose lease is alive by it (``IdempotencyKeyInFlight`` saying the
    clock is off).
    """

    def __init__(
        self,
        url: str,
        *,
        ttl_s: float = TTL_S_DEFAULT,
        lease_s: float = LEASE_S_DEFAULT,
        clock: Callable[[], float] = time.time,
        client_errors: tuple[type[Exception], ...] = (ClientError,),
        store_server_errors: bool = False,
        heartbeat: bool = True,
        result_bytes_max: int = RESULT_BYTES_MAX_DEFAULT,
        purge_interval_s: float = 60.0,
        purge_batch_size: int = 1000,
        busy_timeout_s: float | None = None,
        synchronous: str | None = None,
        pool_size: int | None = None,
        clock_check_s: float = CLOCK_CHECK_S_DEFAULT,
    ) -> None:
        for name, value in (
            ("ttl_s", ttl_s),
            ("lease_s", lease_s),
            ("clock_check_s", clock_check_s),
        ):
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ConfigError(f"{name} must be a positive number of seconds, got {value!r}")
        if result_bytes_max < 1 or purge_batch_size < 1:
            raise ConfigError("result_bytes_max and purge_batch_size must be at least 1")
        self.ttl_s = float(ttl_s)
        self.lease_s = float(lease_s)
        self.result_bytes_max = result_bytes_max
        self._clock = clock
        self._client_errors = client_errors
        self._store_server_errors = store_server_errors
        self._purge_interval_s = purge_interval_s
        self._purge_batch_size = purge_batch_size
        self._last_purge_at = -math.inf
        self._db: Database = open_database(
            url,
            busy_timeout_s=busy_timeout_s,
            synchronous=synchronous,
            pool_size=pool_size,
            default_pool_size=10,
            owner="IdempotencyStore",
        )
        try:
            # Only a check: creating tables is `durably migrate --idempotency`'s job, so a
            # role limited to rows can run the store.
            self._db.check_schema()
            self._skew = SkewCheck(self._db, clock, float(clock_check_s), "idempotency store")
            self._skew.started()
        except BaseException:
            self._db.close()
            raise
        self._heartbeat = _Heartbeat(self, self.lease_s / 3) if heartbeat else None

    # -- the one-call API -------------------------------------------------------------

    def execute(
        self,
        key: str,
        fingerprint: str,
        fn: Callable[..., Any],
        *,
        scope: str = "",
        in_transaction: bool = False,
    ) -> IdempotencyRecord:
        """Run ``fn()`` once for ``key`` and return its stored outcome, now and on retries.

        With ``in_transaction=True``, ``fn(conn)`` receives the store's own connection in
        the transaction that records the outcome, so writes it makes to tables in the same
        database commit together with the outcome or not at all (no lease is needed then:
        a crash rolls both back). Raises IdempotencyKeyReused, IdempotencyKeyInFlight, and
        any exception of ``fn`` that is not stored (after freeing the key for a retry).
        """
        check_key(key)
        check_key(scope, "scope", allow_empty=True)
        if in_transaction:
            return self._execute_in_transaction(scope, key, fingerprint, fn)
        claimed = self.begin(key, fingerprint, scope=scope)
        if isinstance(claimed, IdempotencyRecord):
            return claimed
        try:
            result = fn()
        except Exception as exc:
            if self._stores_error(exc):
                return self.complete(claimed, error=exc)
            self.release(claimed)
            raise
        except BaseException:
            self.release(claimed)
            raise
        return self.complete(claimed, result)

    def idempotent(
        self,
        fn: Callable[..., Any] | None = None,
        *,
        scope: str = "",
        in_transaction: bool = False,
        fingerprint: Callable[..., str] | None = None,
    ) -> Any:
        """Decorate ``fn`` so that calls with the same ``idempotency_key=`` run it once.

        Callers pass ``idempotency_key="..."``; ``fn`` receives it too when its signature
        has that parameter (as durably's step keys arrive). The fingerprint defaults to a
        digest of the function's name and its JSON-encodable arguments; pass
        ``fingerprint=`` (called with the same arguments) otherwise. With
        ``in_transaction=True`` the connection is passed as the first argument. The call
        returns the stored result or raises :class:`RequestFailed` for a stored error.
        """

        def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
            name = f"{func.__module__}.{func.__qualname__}"
            wants_key = "idempotency_key" in inspect.signature(func).parameters

            @functools.wraps(func)
            def wrapper(*args: Any, idempotency_key: str, **kwargs: Any) -> Any:
                if fingerprint is not None:
                    fp = fingerprint(*args, **kwargs)
                else:
                    fp = fingerprint_of(name, list(args), kwargs)
                extra = {"idempotency_key": idempotency_key} if wants_key else {}

                def call(*conn: Any) -> Any:
                    return func(*conn, *args, **kwargs, **extra)

                record = self.execute(
                    idempotency_key, fp, call, scope=scope, in_transaction=in_transaction
                )
                return record.value()

            return wrapper

        return decorate(fn) if fn is not None else decorate

    # -- the building blocks (for async frameworks and the middleware) --------------------

    def begin(self, key: str, fingerprint: str, *, scope: str = "") -> Claim | IdempotencyRecord:
        """Claim ``key`` for a new request, or return the outcome already stored for it.

        A :class:`Claim` means the caller must now do the work and then call
        :meth:`complete` or :meth:`release`; its lease is kept alive meanwhile.
        """
        check_key(key)
        check_key(scope, "scope", allow_empty=True)
        _check_fingerprint(fingerprint)
        self._skew.maybe_check()
        with self._db.transaction(_SQL) as tx:
            outcome = self._claim(tx, scope, key, fingerprint)
        self._maybe_purge()
        if isinstance(outcome, Claim) and self._heartbeat is not None:
            self._heartbeat.add(outcome)
        return outcome

    def complete(
        self, claim: Claim, result: Any = None, *, error: BaseException | None = None
    ) -> IdempotencyRecord:
        """Store the outcome of a claimed request and return it as a record.

        Raises IdempotencyLeaseLost when another request took the key over meanwhile (the
        outcome is then not stored). When the outcome is not JSON or larger than
        ``result_bytes_max``, the work has still happened, so the key must not run it
        again: an ``OutcomeNotStored`` error is stored in its place (retries get it as
        :class:`RequestFailed`) and SerializationError is raised. When storing fails for
        another reason (the database), the key is released before the error is raised,
        rather than held until its lease runs out.
        """
        try:
            values = self._outcome_values(result, error)
        except SerializationError as exc:
            self._complete_or_release(claim, self._not_stored_values(exc), None)
            raise
        return self._complete_or_release(claim, values, error)

    def _complete_or_release(
        self, claim: Claim, values: dict[str, Any], error: BaseException | None
    ) -> IdempotencyRecord:
        try:
            with self._db.transaction(_SQL) as tx:
                return self._complete_in(tx, claim, values, error)
        except IdempotencyLeaseLost:
            raise  # the key is someone else's now: nothing of ours to release
        except BaseException:
            with contextlib.suppress(Exception):
                self.release(claim)  # if this fails too, the lease frees the key
            raise
        finally:
            if self._heartbeat is not None:
                self._heartbeat.remove(claim)

    def release(self, claim: Claim) -> None:
        """Give up a claimed key without an outcome, so the next request with it runs."""
        if self._heartbeat is not None:
            self._heartbeat.remove(claim)
        with self._db.transaction(_SQL) as tx:
            tx.execute("release", {"scope": claim.scope, "key": claim.key, "token": claim.token})

    def renew(self, claim: Claim) -> bool:
        """Extend the claim's lease to ``lease_s`` from now; False if it was taken over."""
        params = {
            "scope": claim.scope,
            "key": claim.key,
            "token": claim.token,
            "lease_expires_at": self._clock() + self.lease_s,
        }
        with self._db.transaction(_SQL) as tx:
            renewed = tx.execute("renew_lease", params) == 1
        if not renewed:
            claim.lost = True
        return renewed

    # -- inspection and upkeep -------------------------------------------------------------

    def get(self, key: str, *, scope: str = "") -> IdempotencyRecord | None:
        """Return the stored, unexpired outcome for ``key``, or None (running keys too)."""
        with self._db.transaction(_SQL) as tx:
            row = tx.one("select_key", {"scope": scope, "key": key})
        if row is None or row["state"] != "done" or row["expires_at"] <= self._judged_now():
            return None
        return _record(row, replayed=True)

    def purge_expired(self) -> int:
        """Delete every expired key now and return how many were deleted.

        Keys are also purged lazily, a batch at a time, by ``begin`` (at most once every
        ``purge_interval_s``); an expired key is never returned even before it is purged.
        """
        deleted = 0
        while True:
            params = {"now": self._judged_now(), "limit": self._purge_batch_size}
            with self._db.transaction(_SQL) as tx:
                n = tx.execute("purge_expired", params)
            deleted += n
            if n < self._purge_batch_size:
                return deleted

    def close(self) -> None:
        """Stop the heartbeat and close the database connections."""
        if self._heartbeat is not None:
            self._heartbeat.stop()
        self._db.close()

    def __enter__(self) -> IdempotencyStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ---------------------------------------------------------------------------

    def _judged_now(self, now: float | None = None) -> float:
        """The time leases and expiry are judged at: this host's clock, less its lead on
        the database's clock when that is past the tolerated bound (see ``_skew``)."""
        return (self._clock() if now is None else now) - self._skew.ahead()

    def _stores_error(self, exc: Exception) -> bool:
        return self._store_server_errors or isinstance(exc, self._client_errors)

    def _claim(self, tx: Tx, scope: str, key: str, fingerprint: str) -> Claim | IdempotencyRecord:
        """Decide, inside one write transaction, whether this request runs, replays or waits."""
        now = self._clock()
        token = uuid.uuid4().hex
        params = {
            "scope": scope,
            "key": key,
            "fingerprint": fingerprint,
            "token": token,
            "now": now,
            "lease_expires_at": now + self.lease_s,
            "expires_at": now + self.ttl_s,
        }
        row: Row | None = None
        for _ in range(_CLAIM_ROUNDS_MAX):
            if tx.execute("insert_claim", params) == 1:
                return Claim(scope, key, fingerprint, token, attempts=1)
            row = tx.one("select_key_for_update", params)
            if row is not None:
                break
            # The conflicting row was released or purged between our two statements
            # (possible on PostgreSQL only); try to insert again.
        if row is None:
            raise IdempotencyKeyInFlight(
                f"idempotency key {key!r} is being claimed and released by other requests"
                " right now; retry in a moment"
            )
        # Judged on the database's clock while this host runs ahead of it past the bound:
        # a lease or a key that looks over by this host's clock may not be over yet.
        judged = self._judged_now(now)
        lease_alive = row["state"] == "running" and (row["lease_expires_at"] or 0) > judged
        if row["expires_at"] <= judged and not lease_alive:
            tx.execute("restart_expired", params)
            return Claim(scope, key, fingerprint, token, attempts=1)
        if row["fingerprint"] != fingerprint:
            # No fingerprint in the message: it is a digest of the first request, and a
            # prefix of it would help guess a small request offline.
            raise IdempotencyKeyReused(
                f"idempotency key {key!r} was first used for a different request, so it was"
                " refused; send the original request unchanged to get its outcome, or use a"
                " new key for a new request"
            )
        if row["state"] == "done":
            return _record(row, replayed=True)
        if lease_alive and (row["lease_expires_at"] or 0) <= now:
            raise IdempotencyKeyInFlight(
                f"a request with idempotency key {key!r} holds a lease that looks expired by"
                " this host's clock but is still alive by the database's: this host's clock"
                f" is {self._skew.ahead():+.1f} s off the database's, so the request (which"
                " may still be running) was not taken over. Fix this host's clock (NTP);"
                " retry shortly to get its stored outcome"
            )
        if lease_alive:
            raise IdempotencyKeyInFlight(
                f"a request with idempotency key {key!r} started {now - row['created_at']:.1f} s"
                " ago is still running, so this one was not run; retry shortly to get its"
                " stored outcome"
            )
        # The previous owner stopped renewing its lease (it died), so this request takes the
        # work over; see docs/idempotency.md for why this can run the work a second time.
        tx.execute("take_over", params)
        return Claim(scope, key, fingerprint, token, attempts=int(row["attempts"]) + 1)

    def _outcome_values(self, result: Any, error: BaseException | None) -> dict[str, Any]:
        if error is None:
            encoded, error_json = canonical_json(result), None
        else:
            data = error.data if isinstance(error, ClientError) else None
            message = error.message if isinstance(error, ClientError) else str(error)
            stored = {"type_name": type(error).__qualname__, "message": message, "data": data}
            encoded, error_json = None, canonical_json(stored)
        size = len((encoded or error_json or "").encode("utf-8"))
        if size > self.result_bytes_max:
            raise SerializationError(
                f"the outcome is {size} bytes of JSON, more than result_bytes_max="
                f"{self.result_bytes_max}; return less (e.g. an id to look the data up) or"
                " raise the limit"
            )
        return {"ok": error is None, "result": encoded, "error": error_json}

    def _not_stored_values(self, exc: SerializationError) -> dict[str, Any]:
        message = (
            f"the request ran, but its outcome could not be stored ({exc}); it is not run"
            " again with this key: look its result up another way, or send a new request"
            " with a new key"
        )
        stored = {"type_name": "OutcomeNotStored", "message": message, "data": None}
        return {"ok": False, "result": None, "error": canonical_json(stored)}

    def _complete_in(
        self, tx: Tx, claim: Claim, values: dict[str, Any], error: BaseException | None
    ) -> IdempotencyRecord:
        now = self._clock()
        params = {
            **values,
            "scope": claim.scope,
            "key": claim.key,
            "token": claim.token,
            "now": now,
            "expires_at": now + self.ttl_s,
        }
        if tx.execute("complete", params) != 1:
            raise IdempotencyLeaseLost(
                f"the request with idempotency key {claim.key!r} ran longer than its lease"
                f" ({self.lease_s:g} s) without renewing it, and another request took the key"
                " over, so this outcome was not stored and the work may have run twice; keep"
                " the heartbeat on, or raise lease_s above the longest request"
            )
        row = tx.one("select_key", params)
        assert row is not None and row["token"] == claim.token, "completed row must be ours"
        return _record(row, replayed=False, exception=error)

    def _execute_in_transaction(
        self, scope: str, key: str, fingerprint: str, fn: Callable[..., Any]
    ) -> IdempotencyRecord:
        _check_fingerprint(fingerprint)
        self._skew.maybe_check()
        with self._db.transaction(_SQL) as tx:
            claimed = self._claim(tx, scope, key, fingerprint)
            if isinstance(claimed, IdempotencyRecord):
                return claimed
            try:
                # The savepoint undoes fn's own writes when it fails, so a stored client
                # error commits only the outcome, never half of the work.
                with tx.savepoint():
                    result = fn(tx.conn)
            except Exception as exc:
                if not self._stores_error(exc):
                    raise  # rolls back the whole transaction: the key stays free
                record = self._complete_in(tx, claimed, self._outcome_values(None, exc), exc)
            else:
                record = self._complete_in(tx, claimed, self._outcome_values(result, None), None)
        self._maybe_purge()
        return record

    def _maybe_purge(self) -> None:
        now = self._clock()
        if now - self._last_purge_at < self._purge_interval_s:
            return
        self._last_purge_at = now
        params = {"now": self._judged_now(now), "limit": self._purge_batch_size}
        with self._db.transaction(_SQL) as tx:
            tx.execute("purge_expired", params)


def _check_fingerprint(fingerprint: object) -> None:
    if not isinstance(fingerprint, str) or not fingerprint:
        raise ConfigError(
            f"fingerprint must be a non-empty string (e.g. from fingerprint_of(...)),"
            f" got {fingerprint!r}"
        )
    if len(fingerprint) > FINGERPRINT_CHARS_MAX:
        raise ConfigError(
            f"fingerprint is {len(fingerprint)} characters; the limit is"
            f" {FINGERPRINT_CHARS_MAX}, so pass a digest (fingerprint_of(...)) not the request"
        )


def _record(
    row: Row, *, replayed: bool, exception: BaseException | None = None
) -> IdempotencyRecord:
    """Build a record from a stored row, checking on the way out what was checked going in."""
    ok = bool(row["ok"])
    error: StoredError | None = None
    result: Any = None
    if ok:
        result = json.loads(row["result"])
    else:
        stored = json.loads(row["error"])
        error = StoredError(stored["type_name"], stored["message"], stored.get("data"))
    return IdempotencyRecord(
        scope=row["scope"],
        key=row["key"],
        fingerprint=row["fingerprint"],
        ok=ok,
        result=result,
        error=error,
        replayed=replayed,
        created_at=float(row["created_at"]),
        completed_at=float(row["completed_at"]),
        expires_at=float(row["expires_at"]),
        attempts=int(row["attempts"]),
        exception=exception,
    )
