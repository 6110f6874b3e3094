-- PostgreSQL queries of the store's leases: claim, claim the next runnable run, renew, release; waking workers.
-- Parameters are psycopg named placeholders
-- (%(name)s). Parameters that can be NULL or that sit in a SELECT list carry an explicit
-- cast: PostgreSQL cannot infer the type of an untyped NULL there.

-- name: lock_run_for_claim
-- The run row locked for the claim. FOR UPDATE also waits for any append still holding
-- its KEY SHARE lock, so no append of the previous owner lands after the claim.
SELECT run_id, workflow, version, prompt_version, queue, input, input_digest, codec_version,
       status, generation, fencing_token, owner, lease_expires_at, starts,
       starts_without_progress, outcome, error_type, error_message, park_reason, wake_at,
       created_at, updated_at, finished_at, incarnation,
       cancel_requested_at, cancel_reason, records_at_last_start
FROM runs WHERE run_id = %(run_id)s
FOR UPDATE;

-- name: count_records
-- A statement of its own after the lock: in READ COMMITTED it then sees every append
-- that committed while the claim waited for the row.
SELECT count(*) FROM steps
WHERE run_id = %(run_id)s AND generation = %(generation)s AND status <> 'intent';

-- name: claim_run
UPDATE runs
SET fencing_token = fencing_token + 1, owner = %(owner)s,
    lease_expires_at = %(lease_expires_at)s, status = 'running', park_reason = NULL,
    wake_at = NULL, wait_signal = NULL, starts = starts + 1,
    starts_without_progress = %(starts_without_progress)s,
    records_at_last_start = %(records)s, updated_at = %(now)s
WHERE run_id = %(run_id)s AND fencing_token = %(expected_token)s
RETURNING run_id, workflow, version, prompt_version, queue, input, input_digest,
          codec_version, status, generation, fencing_token, owner, lease_expires_at, starts,
          starts_without_progress, outcome, error_type, error_message, park_reason, wake_at,
          created_at, updated_at, finished_at, incarnation, cancel_requested_at, cancel_reason;

-- name: quarantine_run
UPDATE runs
SET status = 'quarantined', owner = NULL, lease_expires_at = NULL, updated_at = %(now)s
WHERE run_id = %(run_id)s AND fencing_token = %(expected_token)s;

-- name: renew_lease
UPDATE runs SET lease_expires_at = %(lease_expires_at)s
WHERE run_id = %(run_id)s AND fencing_token = %(token)s AND owner IS NOT NULL;

-- name: release_run
-- A released run may be runnable again (or frees a queue slot): wake waiting workers.
WITH released AS (
UPDATE runs
SET owner = NULL, lease_expires_at = NULL, status = coalesce(%(status)s::text, status),
    park_reason = %(park_reason)s::text, wake_at = %(wake_at)s::double precision,
    wait_signal = NULL, updated_at = %(now)s
WHERE run_id = %(run_id)s AND fencing_token = %(token)s
RETURNING 1
)
SELECT pg_notify(%(channel)s, '') FROM released;

-- name: lock_queue
-- Serialises claims on one concurrency-limited queue, so two workers cannot both see a
-- free slot and both take it; unlimited queues never take this lock.
SELECT pg_advisory_xact_lock(hashtext('durably.queue.' || current_schema()),
                             hashtext(%(queue)s));

-- name: running_per_queue
-- A run of a provably dead owner (%(dead)s) holds no slot: a claim may take it over now.
SELECT queue, count(*) FROM runs
WHERE status = 'running' AND owner IS NOT NULL AND lease_expires_at > %(now)s
  AND queue = ANY(%(queues)s::text[]) AND NOT owner = ANY(%(dead)s::text[])
GROUP BY queue;

-- name: next_runnable
-- The oldest run this worker may take, filtered entirely here: its queue is open, its
-- workflow served (one (workflow, version) pair per registration, NULL for the one without
-- a version; a run without a version is served by any registration of its name: versions
-- route only when set), and
-- it is queued, running with no owner, an expired lease or an owner in %(dead)s (this
-- host's owners found dead in Python), or parked and due. The status term matches the
-- partial index runs_claimable, so finished runs are never read. SKIP LOCKED lets many
-- workers claim at once, each taking a different row, and LIMIT 1 locks only the row
-- this worker takes.
SELECT run_id, workflow, version, prompt_version, queue, input, input_digest, codec_version,
       status, generation, fencing_token, owner, lease_expires_at, starts,
       starts_without_progress, outcome, error_type, error_message, park_reason, wake_at,
       created_at, updated_at, finished_at, incarnation,
       cancel_requested_at, cancel_reason, records_at_last_start
FROM runs
WHERE status IN ('queued', 'running', 'parked')
  AND queue = ANY(%(queues)s::text[])
  AND EXISTS (SELECT 1 FROM unnest(%(workflows)s::text[], %(versions)s::text[]) AS s (w, v)
              WHERE s.w = runs.workflow AND (runs.version IS NULL OR s.v = runs.version))
  AND (status = 'queued'
       OR (status = 'running' AND (owner IS NULL OR lease_expires_at <= %(now)s
                                   OR owner = ANY(%(dead)s::text[])))
       OR (status = 'parked' AND wake_at IS NOT NULL AND wake_at <= %(now)s))
ORDER BY created_at, run_id
LIMIT 1
FOR UPDATE SKIP LOCKED;

-- name: same_host_owners
-- The owners holding live leases on this host (%(pattern)s from Owner.host_pattern): the
-- only ones whose liveness Python can judge (their pids are local). The IN term lets
-- the planner use runs_claimable, which holds no finished run.
SELECT DISTINCT owner FROM runs
WHERE status IN ('queued', 'running', 'parked') AND status = 'running'
  AND lease_expires_at > %(now)s AND owner LIKE %(pattern)s
LIMIT %(limit)s;

-- name: notify_work
-- Wakes workers blocked in wait_for_work; delivered at commit, so never before the change
-- it announces is visible.
SELECT pg_notify(%(channel)s, '');

-- name: own_claim
-- The run this owner claimed at %(now)s, if any: a claim stamps updated_at and the lease
-- with its own time, so a claim_next run again after an unknown commit finds the run its
-- first attempt took instead of taking a second one.
SELECT run_id, workflow, version, prompt_version, queue, input, input_digest, codec_version,
       status, generation, fencing_token, owner, lease_expires_at, starts,
       starts_without_progress, outcome, error_type, error_message, park_reason, wake_at,
       created_at, updated_at, finished_at, incarnation, cancel_requested_at, cancel_reason
FROM runs
WHERE owner = %(owner)s AND status = 'running' AND updated_at = %(now)s
  AND lease_expires_at = %(lease_expires_at)s
ORDER BY run_id
LIMIT 1;
