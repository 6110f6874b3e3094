"""The transactional outbox: record a message with your state change, deliver it later.

A service that changes its own state and must tell another system about it cannot do both
atomically. The outbox makes the message part of the state change: ``outbox.add(conn, ...)``
inserts it in the caller's own transaction, so it exists exactly when the change committed.
A relay then delivers each message at least once, always with the same idempotency key, so
a receiver that honours keys (such as :class:`~durably.idempotency.IdempotencyMiddleware`)
applies it once. Failed deliveries are retried with exponential backoff up to
``max_attempts``, after which the message is marked ``dead`` for a human to look at.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from durably.errors import ConfigError, IdempotencyKeyReused
from durably.history import describe_error, storable_text
from durably.idempotency._db import Database, Row, Tx, load_queries, open_database
from durably.idempotency._skew import CLOCK_CHECK_S_DEFAULT, SkewCheck
from durably.idempotency.store import canonical_json, check_key
from durably.redact import redact

_SQL = "outbox.sql"
BATCH_SIZE_MAX = 1000
LAST_ERROR_CHARS_MAX = 2000


@dataclass(frozen=True)
class OutboxMessage:
    """One message to deliver: send ``payload`` to ``destination`` with ``key``.

    ``attempts`` counts deliveries started so far, this one included.
    """

    id: int
    key: str
    destination: str
    payload: Any
    attempts: int
    created_at: float


@dataclass(frozen=True)
class OutboxEntry:
    """A stored message with its delivery state, as :meth:`Outbox.messages` lists it."""

    id: int
    key: str
    destination: str
    payload: Any
    status: str
    attempts: int
    created_at: float
    next_attempt_at: float
    last_error: str | None
    delivered_at: float | None


@dataclass(frozen=True)
class RelayReport:
    """What one relay pass did: messages claimed, delivered, retried later, and given up.

    ``lost`` counts messages whose claim ran out while this relay held them (it stalled
    longer than ``claim_lease_s``), so another relay took them over: they are not counted
    as delivered here, and the one delivery this relay may have made is the at-least-once
    duplicate the receiver's key dedupes.
    """

    claimed: int = 0
    delivered: int = 0
    retrying: int = 0
    dead: int = 0
    lost: int = 0

    def __add__(self, other: RelayReport) -> RelayReport:
        return RelayReport(
            self.claimed + other.claimed,
            self.delivered + other.delivered,
            self.retrying + other.retrying,
            self.dead + other.dead,
            self.lost + other.lost,
        )


class Outbox:
    """A table of messages in your database, and the relay that delivers them.

    ``url`` must name the database your own state lives in (``sqlite:///app.db`` or
    ``postgresql://...``): the table is created there. ``max_attempts`` bounds deliveries
    per message; a failed delivery waits ``backoff_base_s * 2**(attempts-1)`` seconds (at
    most ``backoff_max_s``) before the next one. A relay holds its claimed messages for
    ``claim_lease_s``; if it dies, another relay delivers them again after that (at least
    once). ``clock`` returns epoch seconds and is injectable for tests. On SQLite,
    ``busy_timeout_s`` (default 5 s); on PostgreSQL, ``pool_size`` (default 4): an option
    of the other database is refused (``ConfigError``), never ignored. On PostgreSQL the
    outbox compares ``clock`` with the database's at start and every ``clock_check_s``
    real seconds, as :class:`~durably.idempotency.IdempotencyStore` does: a relay whose
    clock runs ahead is warned about and takes over no claim alive by the database's clock.
    """

    def __init__(
        self,
        url: str,
        *,
        max_attempts: int = 10,
        backoff_base_s: float = 1.0,
        backoff_max_s: float = 600.0,
        claim_lease_s: float = 60.0,
        clock: Callable[[], float] = time.time,
        busy_timeout_s: float | None = None,
        pool_size: int | None = None,
        clock_check_s: float = CLOCK_CHECK_S_DEFAULT,
    ) -> None:
        if not (isinstance(clock_check_s, int | float) and clock_check_s > 0):
            raise ConfigError(f"clock_check_s must be a positive number, got {clock_check_s!r}")
        if max_attempts < 1:
            raise ConfigError(f"max_attempts must be at least 1, got {max_attempts}")
        if backoff_base_s < 0 or backoff_max_s < backoff_base_s or claim_lease_s <= 0:
            raise ConfigError(
                "need 0 <= backoff_base_s <= backoff_max_s and claim_lease_s > 0, got"
                f" {backoff_base_s}, {backoff_max_s}, {claim_lease_s}"
            )
        self.max_attempts = max_attempts
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.claim_lease_s = claim_lease_s
        self._clock = clock
        self._db: Database = open_database(
            url,
            busy_timeout_s=busy_timeout_s,
            pool_size=pool_size,
            default_pool_size=4,
            owner="Outbox",
        )
        try:
            self._db.check_schema()  # tables come from `durably migrate --idempotency`
            self._skew = SkewCheck(self._db, clock, float(clock_check_s), "outbox relay")
            self._skew.started()
        except BaseException:
            self._db.close()
            raise

    # -- recording ------------------------------------------------------------------------

    def add(self, conn: Any, destination: str, payload: Any, *, key: str | None = None) -> str:
        """Record a message in the caller's open transaction on ``conn``; return its key.

        ``conn`` is your own ``sqlite3.Connection`` or ``psycopg.Connection`` on the outbox's
        database; nothing is committed here, so the message commits (or rolls back) with
        your own writes. Adding the same ``key`` again with the same destination and payload
        is a no-op (safe for retried handlers); with another one it raises
        IdempotencyKeyReused. Without a key a random one is made.
        """
        dialect = _dialect_of(conn)
        if dialect != self._db.dialect:
            raise ConfigError(
                f"outbox.add() got a {dialect} connection but the outbox lives in a"
                f" {self._db.dialect} database; pass a connection to the outbox's database"
            )
        key = check_key(key if key is not None else uuid.uuid4().hex, "outbox key")
        if not isinstance(destination, str) or not destination:
            raise ConfigError(f"destination must be a non-empty string, got {destination!r}")
        encoded = canonical_json(payload)
        digest = hashlib.sha256(f"{destination}\n{encoded}".encode()).hexdigest()
        tx = Tx(conn, load_queries(dialect, _SQL), dialect)
        params = {
            "key": key,
            "destination": destination,
            "payload": encoded,
            "payload_digest": digest,
            "now": self._clock(),
        }
        if tx.execute("insert", params) == 0:
            existing = tx.one("select_by_key", params)
            if existing is not None and existing["payload_digest"] != digest:
                raise IdempotencyKeyReused(
                    f"outbox key {key!r} was already used for another message (to"
                    f" {existing['destination']!r}); use a new key for a new message"
                )
        return key

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        """Yield a connection in an open transaction on the outbox's database.

        A convenience for callers without their own connection handling: write your state
        and call :meth:`add` on the yielded connection; it commits when the block ends.
        """
        with self._db.transaction(_SQL) as tx:
            yield tx.conn

    # -- delivering -------------------------------------------------------------------------

    def relay(
        self, deliver: Callable[[OutboxMessage], object], *, batch_size: int = 100
    ) -> RelayReport:
        """Deliver one batch of due messages, oldest first, and report what happened.

        ``deliver(message)`` must send ``message.payload`` to ``message.destination`` with
        ``message.key`` as its idempotency key and raise on failure. A message is marked
        delivered only after ``deliver`` returns, so a crash in between delivers it again
        (with the same key) once its claim runs out.
        """
        if not 1 <= batch_size <= BATCH_SIZE_MAX:
            raise ConfigError(
                f"batch_size must be between 1 and {BATCH_SIZE_MAX}, got {batch_size}"
            )
        token = uuid.uuid4().hex
        self._skew.maybe_check()
        messages = self._claim(token, batch_size)
        report = RelayReport(claimed=len(messages))
        if not messages:
            return report
        # The batch's claims are renewed while this relay works through it, however long
        # the deliveries take, so no other relay takes a message this one still holds.
        keeper = _ClaimKeeper(self, token)
        try:
            for message in messages:
                report += self._deliver_one(deliver, message, token)
        finally:
            keeper.stop()
        return report

    def _deliver_one(
        self, deliver: Callable[[OutboxMessage], object], message: OutboxMessage, token: str
    ) -> RelayReport:
        """Deliver one claimed message if this relay still holds it; report what happened."""
        if self._mark("hold_claim", {"id": message.id, "token": token, **self._lease()}) != 1:
            return RelayReport(lost=1)  # taken over by another relay: it delivers it
        try:
            deliver(message)
        except Exception as exc:
            return self._failed(message, token, exc)
        # Fenced by the claim: a relay whose claim ran out meanwhile does not mark (or
        # count) a message another relay now holds.
        if self._mark("mark_delivered", {"id": message.id, "token": token}) != 1:
            return RelayReport(lost=1)
        return RelayReport(delivered=1)

    def _lease(self) -> dict[str, float]:
        return {"claimed_until": self._clock() + self.claim_lease_s}

    def relay_loop(
        self,
        deliver: Callable[[OutboxMessage], object],
        *,
        stop: threading.Event,
        batch_size: int = 100,
        poll_interval_s: float = 1.0,
    ) -> RelayReport:
        """Run :meth:`relay` until ``stop`` is set, pausing ``poll_interval_s`` when idle."""
        total = RelayReport()
        while not stop.is_set():
            report = self.relay(deliver, batch_size=batch_size)
            total += report
            if report.claimed < batch_size:
                stop.wait(poll_interval_s)
        return total

    def messages(self, *, status: str | None = None, limit: int = 100) -> list[OutboxEntry]:
        """List stored messages (optionally of one status: pending, delivered, dead)."""
        with self._db.transaction(_SQL) as tx:
            rows = tx.all("list_messages", {"status": status, "limit": limit})
        return [_entry(row) for row in rows]

    def close(self) -> None:
        """Close the outbox's own database connections (never the callers')."""
        self._db.close()

    def __enter__(self) -> Outbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ---------------------------------------------------------------------------

    def backoff_s(self, attempts: int) -> float:
        """Seconds to wait after the ``attempts``-th failed delivery."""
        return float(min(self.backoff_max_s, self.backoff_base_s * 2 ** max(0, attempts - 1)))

    def _claim(self, token: str, batch_size: int) -> list[OutboxMessage]:
        now = self._clock()
        params = {
            # Due times and other relays' claims judged on the database's clock while this
            # host runs ahead of it past the bound: a claim alive by it is not taken over.
            "now": now - self._skew.ahead(),
            "token": token,
            "claimed_until": now + self.claim_lease_s,
            "max_attempts": self.max_attempts,
            "limit": batch_size,
        }
        with self._db.transaction(_SQL) as tx:
            tx.execute("bury_exhausted", params)
            rows = tx.all("claim_batch", params)
        rows.sort(key=lambda r: int(r["id"]))
        return [
            OutboxMessage(
                id=int(r["id"]),
                key=r["key"],
                destination=r["destination"],
                payload=json.loads(r["payload"]),
                attempts=int(r["attempts"]),
                created_at=float(r["created_at"]),
            )
            for r in rows
        ]

    def _failed(self, message: OutboxMessage, token: str, exc: Exception) -> RelayReport:
        dead = message.attempts >= self.max_attempts
        # str(exc) of a driver or HTTP error may quote a URL with its credentials.
        # storable_text: a NUL (PostgreSQL refuses it) or a lone surrogate in the message,
        # or a __str__ that raises, must not make recording the failure fail.
        text = redact(f"{type(exc).__qualname__}: {describe_error(exc)}")
        error = storable_text(text, LAST_ERROR_CHARS_MAX)[:LAST_ERROR_CHARS_MAX]
        marked = self._mark(
            "mark_failed",
            {
                "id": message.id,
                "token": token,
                "status": "dead" if dead else "pending",
                "next_attempt_at": self._clock() + self.backoff_s(message.attempts),
                "last_error": error,
            },
        )
        if marked != 1:
            return RelayReport(lost=1)
        return RelayReport(dead=1) if dead else RelayReport(retrying=1)

    def _mark(self, name: str, params: dict[str, Any]) -> int:
        """Run one fenced update; return the number of rows it changed."""
        with self._db.transaction(_SQL) as tx:
            return tx.execute(name, {"now": self._clock(), **params})


class _ClaimKeeper:
    """A thread renewing one relay pass's claims every third of ``claim_lease_s``.

    It runs in real time (a claim must stay alive in real time) and stops with the pass. A
    failed renewal is retried at the next beat; the claim leaves room for a missed one.
    """

    def __init__(self, outbox: Outbox, token: str) -> None:
        self._outbox = outbox
        self._token = token
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="durably-outbox-claims", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        outbox = self._outbox
        while not self._stop.wait(outbox.claim_lease_s / 3):
            try:
                outbox._mark("renew_claims", {"token": self._token, **outbox._lease()})
            except Exception:
                continue  # a database hiccup: try again at the next beat

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def _dialect_of(conn: Any) -> str:
    if isinstance(conn, sqlite3.Connection):
        return "sqlite"
    if type(conn).__module__.startswith("psycopg"):
        return "postgres"
    raise ConfigError(
        f"outbox.add() needs a sqlite3.Connection or a psycopg.Connection, got"
        f" {type(conn).__name__}"
    )


def _entry(row: Row) -> OutboxEntry:
    return OutboxEntry(
        id=int(row["id"]),
        key=row["key"],
        destination=row["destination"],
        payload=json.loads(row["payload"]),
        status=row["status"],
        attempts=int(row["attempts"]),
        created_at=float(row["created_at"]),
        next_attempt_at=float(row["next_attempt_at"]),
        last_error=row["last_error"],
        delivered_at=None if row["delivered_at"] is None else float(row["delivered_at"]),
    )
