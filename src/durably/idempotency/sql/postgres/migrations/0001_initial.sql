-- The receiving side's tables (durably.idempotency): idempotency keys, the outbox, and
-- the version of this schema. IF NOT EXISTS: databases whose tables were created by an
-- older durably (which created them on start) are adopted as they are.

CREATE TABLE IF NOT EXISTS durably_idempotency_keys (
    scope            TEXT             NOT NULL,
    key              TEXT             NOT NULL,
    fingerprint      TEXT             NOT NULL,
    state            TEXT             NOT NULL CHECK (state IN ('running', 'done')),
    token            TEXT             NOT NULL,
    attempts         INTEGER          NOT NULL DEFAULT 1,
    ok               BOOLEAN,
    result           TEXT,
    error            TEXT,
    created_at       DOUBLE PRECISION NOT NULL,
    completed_at     DOUBLE PRECISION,
    lease_expires_at DOUBLE PRECISION,
    expires_at       DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (scope, key)
);
CREATE INDEX IF NOT EXISTS durably_idempotency_keys_expires_at
    ON durably_idempotency_keys (expires_at);

CREATE TABLE IF NOT EXISTS durably_outbox (
    id              BIGSERIAL        PRIMARY KEY,
    key             TEXT             NOT NULL UNIQUE,
    destination     TEXT             NOT NULL,
    payload         TEXT             NOT NULL,
    payload_digest  TEXT             NOT NULL,
    status          TEXT             NOT NULL CHECK (status IN ('pending', 'delivered', 'dead')),
    attempts        INTEGER          NOT NULL DEFAULT 0,
    created_at      DOUBLE PRECISION NOT NULL,
    next_attempt_at DOUBLE PRECISION NOT NULL,
    claimed_until   DOUBLE PRECISION,
    claim_token     TEXT,
    last_error      TEXT,
    delivered_at    DOUBLE PRECISION
);
CREATE INDEX IF NOT EXISTS durably_outbox_due
    ON durably_outbox (status, next_attempt_at);

CREATE TABLE IF NOT EXISTS durably_idempotency_meta (
    key   TEXT NOT NULL PRIMARY KEY,
    value TEXT NOT NULL
);
