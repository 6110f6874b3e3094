-- Named queries for the transactional outbox on PostgreSQL.
-- Times are epoch seconds from the outbox's injected clock.

-- name: insert
INSERT INTO durably_outbox
    (key, destination, payload, payload_digest, status, attempts, created_at, next_attempt_at)
VALUES (%(key)s, %(destination)s, %(payload)s, %(payload_digest)s, 'pending', 0, %(now)s,
        %(now)s)
ON CONFLICT (key) DO NOTHING;

-- name: select_by_key
SELECT id, key, destination, payload, payload_digest, status, attempts, created_at,
       next_attempt_at, claimed_until, last_error, delivered_at
FROM durably_outbox
WHERE key = %(key)s;

-- name: bury_exhausted
-- A message whose last attempt was claimed but never reported (the relay died while
-- delivering) has used up its attempts once its claim runs out.
UPDATE durably_outbox
SET status = 'dead', claimed_until = NULL, claim_token = NULL
WHERE status = 'pending' AND attempts >= %(max_attempts)s
  AND claimed_until IS NOT NULL AND claimed_until <= %(now)s;

-- name: claim_batch
-- SKIP LOCKED lets several relays share the table without waiting on each other. Each
-- claim counts as an attempt, so a message that crashes its relay still runs out of them.
UPDATE durably_outbox
SET claimed_until = %(claimed_until)s, claim_token = %(token)s, attempts = attempts + 1
WHERE id IN (
    SELECT id FROM durably_outbox
    WHERE status = 'pending' AND next_attempt_at <= %(now)s
      AND attempts < %(max_attempts)s
      AND (claimed_until IS NULL OR claimed_until <= %(now)s)
    ORDER BY id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
RETURNING id, key, destination, payload, attempts, created_at;

-- name: hold_claim
-- Right before a delivery: extend this relay's claim on one message, or find that another
-- relay has taken it over (its claim ran out), in which case this relay must not deliver.
UPDATE durably_outbox
SET claimed_until = %(claimed_until)s
WHERE id = %(id)s AND claim_token = %(token)s AND status = 'pending';

-- name: renew_claims
-- The relay's keeper: extend the claims of every message of the batch not yet reported.
UPDATE durably_outbox
SET claimed_until = %(claimed_until)s
WHERE claim_token = %(token)s AND status = 'pending';

-- name: mark_delivered
UPDATE durably_outbox
SET status = 'delivered', delivered_at = %(now)s, claimed_until = NULL, claim_token = NULL,
    last_error = NULL
WHERE id = %(id)s AND claim_token = %(token)s;

-- name: mark_failed
UPDATE durably_outbox
SET status = %(status)s, next_attempt_at = %(next_attempt_at)s,
    last_error = %(last_error)s, claimed_until = NULL, claim_token = NULL
WHERE id = %(id)s AND claim_token = %(token)s;

-- name: list_messages
SELECT id, key, destination, payload, payload_digest, status, attempts, created_at,
       next_attempt_at, claimed_until, last_error, delivered_at
FROM durably_outbox
WHERE (%(status)s::text IS NULL OR status = %(status)s::text)
ORDER BY id
LIMIT %(limit)s;
