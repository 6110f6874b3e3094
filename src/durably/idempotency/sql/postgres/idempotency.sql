-- Named queries for the idempotency key store on PostgreSQL.
-- Times are epoch seconds from the store's injected clock, never now(), so tests can move
-- time without sleeping.

-- name: insert_claim
-- When another transaction has inserted the same key and not yet committed, this waits
-- for it, so a transactional execute() behind it sees its committed outcome.
INSERT INTO durably_idempotency_keys
    (scope, key, fingerprint, state, token, attempts, created_at, lease_expires_at, expires_at)
VALUES (%(scope)s, %(key)s, %(fingerprint)s, 'running', %(token)s, 1, %(now)s,
        %(lease_expires_at)s, %(expires_at)s)
ON CONFLICT (scope, key) DO NOTHING;

-- name: select_key
SELECT scope, key, fingerprint, state, token, attempts, ok, result, error,
       created_at, completed_at, lease_expires_at, expires_at
FROM durably_idempotency_keys
WHERE scope = %(scope)s AND key = %(key)s;

-- name: select_key_for_update
SELECT scope, key, fingerprint, state, token, attempts, ok, result, error,
       created_at, completed_at, lease_expires_at, expires_at
FROM durably_idempotency_keys
WHERE scope = %(scope)s AND key = %(key)s
FOR UPDATE;

-- name: restart_expired
UPDATE durably_idempotency_keys
SET fingerprint = %(fingerprint)s, state = 'running', token = %(token)s, attempts = 1,
    ok = NULL, result = NULL, error = NULL, created_at = %(now)s, completed_at = NULL,
    lease_expires_at = %(lease_expires_at)s, expires_at = %(expires_at)s
WHERE scope = %(scope)s AND key = %(key)s;

-- name: take_over
UPDATE durably_idempotency_keys
SET token = %(token)s, attempts = attempts + 1, lease_expires_at = %(lease_expires_at)s,
    expires_at = %(expires_at)s
WHERE scope = %(scope)s AND key = %(key)s AND state = 'running';

-- name: renew_lease
UPDATE durably_idempotency_keys
SET lease_expires_at = %(lease_expires_at)s
WHERE scope = %(scope)s AND key = %(key)s AND token = %(token)s AND state = 'running';

-- name: complete
UPDATE durably_idempotency_keys
SET state = 'done', ok = %(ok)s, result = %(result)s, error = %(error)s,
    completed_at = %(now)s, lease_expires_at = NULL, expires_at = %(expires_at)s
WHERE scope = %(scope)s AND key = %(key)s AND token = %(token)s AND state = 'running';

-- name: release
DELETE FROM durably_idempotency_keys
WHERE scope = %(scope)s AND key = %(key)s AND token = %(token)s AND state = 'running';

-- name: purge_expired
-- A running key whose lease is still alive is never purged, even past its window: its
-- owner is working and will store the outcome.
DELETE FROM durably_idempotency_keys
WHERE (scope, key) IN (
    SELECT scope, key FROM durably_idempotency_keys
    WHERE expires_at <= %(now)s
      AND (state = 'done' OR lease_expires_at IS NULL OR lease_expires_at <= %(now)s)
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
);

-- name: db_time
-- The server's clock, to compare with the store's own (the skew check, _skew.py).
SELECT extract(epoch FROM clock_timestamp())::double precision AS now;
