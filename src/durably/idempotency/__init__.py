"""The receiving side: honour idempotency keys so effects happen effectively once.

* :class:`IdempotencyStore`: a dedupe store on SQLite or PostgreSQL with the semantics of
  Stripe's idempotent requests and the IETF Idempotency-Key draft.
* :class:`IdempotencyMiddleware`: pure ASGI middleware applying it to HTTP requests.
* :class:`Outbox`: record outgoing messages in your own transaction; a relay delivers them
  at least once, each with a stable idempotency key.

Nothing here imports psycopg or a web framework until it is used, so importing this
package is cheap and works without the optional dependencies. The tables are created by
``durably migrate --idempotency`` (or :func:`migrate`), never on start. See
docs/idempotency.md.
"""

from __future__ import annotations

from durably.errors import IdempotencyKeyInFlight, IdempotencyKeyReused, SchemaNotMigrated
from durably.idempotency.middleware import (
    PER_SESSION_HEADERS,
    IdempotencyMiddleware,
    request_fingerprint,
)
from durably.idempotency.outbox import Outbox, OutboxEntry, OutboxMessage, RelayReport
from durably.idempotency.schema import migrate
from durably.idempotency.store import (
    KEY_CHARS_MAX,
    Claim,
    ClientError,
    IdempotencyLeaseLost,
    IdempotencyRecord,
    IdempotencyStore,
    InvalidIdempotencyKey,
    RequestFailed,
    StoredError,
    fingerprint_of,
)

__all__ = [
    "KEY_CHARS_MAX",
    "PER_SESSION_HEADERS",
    "Claim",
    "ClientError",
    "IdempotencyKeyInFlight",
    "IdempotencyKeyReused",
    "IdempotencyLeaseLost",
    "IdempotencyMiddleware",
    "IdempotencyRecord",
    "IdempotencyStore",
    "InvalidIdempotencyKey",
    "Outbox",
    "OutboxEntry",
    "OutboxMessage",
    "RelayReport",
    "RequestFailed",
    "SchemaNotMigrated",
    "StoredError",
    "fingerprint_of",
    "migrate",
    "request_fingerprint",
]
