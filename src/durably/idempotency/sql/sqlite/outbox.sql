-- Named queries for the transactional outbox on SQLite.
-- Times are epoch seconds from the outbox's injected clock.

-- name: insert
INSERT INTO durably_outbox
    (key, destination, payload, payload_digest, status, attempts, created_at, next_attempt_at)
VALUES (:key, :destination, :payload, :payload_digest, 'pending', 0, :now, :now)
ON CONFLICT (key) DO NOTHING;

-- name: select_by_key
SELECT id, key, destination, payload, payload_digest, status, attempts, created_at,
       next_attempt_at, claimed_until, last_error, delivered_at
FROM durably_outbox
WHERE key = :key;

-- name: bury_exhausted
-- A message whose last attempt was claimed but never reported (the relay died while
-- delivering) has used up its attempts once its claim runs out.
UPDATE durably_outbox
SET status = 'dead', claimed_until = NULL, claim_token = NULL
WHERE status = 'pending' AND attempts >= :max_attempts
  AND claimed_until IS NOT NULL AND claimed_until <= :now;

-- name: claim_batch
-- BEGIN IMMEDIATE serializes relays on SQLite, so no row locks are needed. Each claim
-- counts as an attempt, so a message that crashes its relay still runs out of attempts.
UPDATE durably_outbox
SET claimed_until = :claimed_until, claim_token = :token, attempts = attempts + 1
WHERE id IN (
    SELECT id FROM durably_outbox
    WHERE status = 'pending' AND next_attempt_at <= :now AND attempts < :max_attempts
      AND (claimed_until IS NULL OR claimed_until <= :now)
    ORDER BY id
    LIMIT :limit
)
RETURNING id, key, destination, payload, attempts, created_at;

-- name: hold_claim
-- Right before a delivery: extend this relay's claim on one message, or find that another
-- relay has taken it over (its claim ran out), in which case this relay must not deliver.
UPDATE durably_outbox
SET claimed_until = :claimed_until
WHERE id = :id AND claim_token = :token AND status = 'pending';

-- name: renew_claims
-- The relay's keeper: extend the claims of every message of the batch not yet reported.
UPDATE durably_outbox
SET claimed_until = :claimed_until
WHERE claim_token = :token AND status = 'pending';

-- name: mark_delivered
UPDATE durably_outbox
SET status = 'delivered', delivered_at = :now, claimed_until = NULL, claim_token = NULL,
    last_error = NULL
WHERE id = :id AND claim_token = :token;

-- name: mark_failed
UPDATE durably_outbox
SET status = :status, next_attempt_at = :next_attempt_at, last_error = :last_error,
    claimed_until = NULL, claim_token = NULL
WHERE id = :id AND claim_token = :token;

-- name: list_messages
SELECT id, key, destination, payload, payload_digest, status, attempts, created_at,
       next_attempt_at, claimed_until, last_error, delivered_at
FROM durably_outbox
WHERE (:status IS NULL OR status = :status)
ORDER BY id
LIMIT :limit;
