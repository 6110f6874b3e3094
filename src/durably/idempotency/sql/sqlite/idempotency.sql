-- Named queries for the idempotency key store on SQLite.
-- Times are epoch seconds from the store's injected clock, never the database's own clock,
-- so tests can move time without sleeping.

-- name: insert_claim
INSERT INTO durably_idempotency_keys
    (scope, key, fingerprint, state, token, attempts, created_at, lease_expires_at, expires_at)
VALUES (:scope, :key, :fingerprint, 'running', :token, 1, :now, :lease_expires_at, :expires_at)
ON CONFLICT (scope, key) DO NOTHING;

-- name: select_key
SELECT scope, key, fingerprint, state, token, attempts, ok, result, error,
       created_at, completed_at, lease_expires_at, expires_at
FROM durably_idempotency_keys
WHERE scope = :scope AND key = :key;

-- name: select_key_for_update
-- BEGIN IMMEDIATE already holds the database's write lock, so no row lock is needed.
SELECT scope, key, fingerprint, state, token, attempts, ok, result, error,
       created_at, completed_at, lease_expires_at, expires_at
FROM durably_idempotency_keys
WHERE scope = :scope AND key = :key;

-- name: restart_expired
UPDATE durably_idempotency_keys
SET fingerprint = :fingerprint, state = 'running', token = :token, attempts = 1,
    ok = NULL, result = NULL, error = NULL, created_at = :now, completed_at = NULL,
    lease_expires_at = :lease_expires_at, expires_at = :expires_at
WHERE scope = :scope AND key = :key;

-- name: take_over
UPDATE durably_idempotency_keys
SET token = :token, attempts = attempts + 1, lease_expires_at = :lease_expires_at,
    expires_at = :expires_at
WHERE scope = :scope AND key = :key AND state = 'running';

-- name: renew_lease
UPDATE durably_idempotency_keys
SET lease_expires_at = :lease_expires_at
WHERE scope = :scope AND key = :key AND token = :token AND state = 'running';

-- name: complete
UPDATE durably_idempotency_keys
SET state = 'done', ok = :ok, result = :result, error = :error, completed_at = :now,
    lease_expires_at = NULL, expires_at = :expires_at
WHERE scope = :scope AND key = :key AND token = :token AND state = 'running';

-- name: release
DELETE FROM durably_idempotency_keys
WHERE scope = :scope AND key = :key AND token = :token AND state = 'running';

-- name: purge_expired
-- A running key whose lease is still alive is never purged, even past its window: its
-- owner is working and will store the outcome.
DELETE FROM durably_idempotency_keys
WHERE (scope, key) IN (
    SELECT scope, key FROM durably_idempotency_keys
    WHERE expires_at <= :now
      AND (state = 'done' OR lease_expires_at IS NULL OR lease_expires_at <= :now)
    LIMIT :limit
);
