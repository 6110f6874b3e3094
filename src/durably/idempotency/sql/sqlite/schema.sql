-- The current schema of the receiving side's tables (durably.idempotency), as the
-- migrations in migrations/ produce it (a test checks that they agree). Create or upgrade
-- a database with `durably migrate --idempotency --db URL`.

CREATE TABLE IF NOT EXISTS durably_idempotency_keys (
    scope            TEXT    NOT NULL,
    key              TEXT    NOT NULL,
    fingerprint      TEXT    NOT NULL,
    state            TEXT    NOT NULL CHECK (state IN ('running', 'done')),
    token            TEXT    NOT NULL,
    attempts         INTEGER NOT NULL DEFAULT 1,
    ok               INTEGER,
    result           TEXT,
    error            TEXT,
    created_at       REAL    NOT NULL,
    completed_at     REAL,
    lease_expires_at REAL,
    expires_at       REAL    NOT NULL,
    PRIMARY KEY (scope, key)
);
CREATE INDEX IF NOT EXISTS durably_idempotency_keys_expires_at
    ON durably_idempotency_keys (expires_at);

CREATE TABLE IF NOT EXISTS durably_outbox (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    key             TEXT    NOT NULL UNIQUE,
    destination     TEXT    NOT NULL,
    payload         TEXT    NOT NULL,
    payload_digest  TEXT    NOT NULL,
    status          TEXT    NOT NULL CHECK (status IN ('pending', 'delivered', 'dead')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    created_at      REAL    NOT NULL,
    next_attempt_at REAL    NOT NULL,
    claimed_until   REAL,
    claim_token     TEXT,
    last_error      TEXT,
    delivered_at    REAL
);
CREATE INDEX IF NOT EXISTS durably_outbox_due
    ON durably_outbox (status, next_attempt_at);

CREATE TABLE IF NOT EXISTS durably_idempotency_meta (
    key   TEXT NOT NULL PRIMARY KEY,
    value TEXT NOT NULL
);
