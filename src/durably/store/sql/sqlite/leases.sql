-- SQLite queries of the store's leases: claim, claim the next runnable run, renew, release; waking workers.
-- Parameters are named (:name).

-- name: count_records
SELECT count(*) FROM steps
WHERE run_id = :run_id AND generation = :generation AND status <> 'intent';

-- name: claim_run
UPDATE runs
SET fencing_token = fencing_token + 1, owner = :owner, lease_expires_at = :lease_expires_at,
    status = 'running', park_reason = NULL, wake_at = NULL, wait_signal = NULL,
    starts = starts + 1,
    starts_without_progress = :starts_without_progress,
    records_at_last_start = :records, updated_at = :now
WHERE run_id = :run_id AND fencing_token = :expected_token
RETURNING run_id, workflow, version, prompt_version, queue, input, input_digest,
          codec_version, status, generation, fencing_token, owner, lease_expires_at, starts,
          starts_without_progress, outcome, error_type, error_message, park_reason, wake_at,
          created_at, updated_at, finished_at, incarnation, cancel_requested_at, cancel_reason;

-- name: quarantine_run
UPDATE runs
SET status = 'quarantined', owner = NULL, lease_expires_at = NULL, updated_at = :now
WHERE run_id = :run_id AND fencing_token = :expected_token;

-- name: renew_lease
UPDATE runs SET lease_expires_at = :lease_expires_at
WHERE run_id = :run_id AND fencing_token = :token AND owner IS NOT NULL;

-- name: release_run
UPDATE runs
SET owner = NULL, lease_expires_at = NULL, status = coalesce(:status, status),
    park_reason = :park_reason, wake_at = :wake_at, wait_signal = NULL, updated_at = :now
WHERE run_id = :run_id AND fencing_token = :token;

-- name: lock_run_for_claim
-- The run a claim or requeue decides on, with records_at_last_start last (the caller's
-- BEGIN IMMEDIATE holds the lock).
SELECT run_id, workflow, version, prompt_version, queue, input, input_digest, codec_version,
       status, generation, fencing_token, owner, lease_expires_at, starts,
       starts_without_progress, outcome, error_type, error_message, park_reason, wake_at,
       created_at, updated_at, finished_at, incarnation, cancel_requested_at, cancel_reason,
       records_at_last_start
FROM runs WHERE run_id = :run_id;

-- name: running_per_queue
-- A run of a provably dead owner (:dead) holds no slot: a claim may take it over now.
SELECT queue, count(*) FROM runs
WHERE status = 'running' AND owner IS NOT NULL AND lease_expires_at > :now
  AND owner NOT IN (SELECT value FROM json_each(:dead))
GROUP BY queue;

-- name: next_runnable
-- The oldest run this worker may take, filtered entirely here (never a fixed window read
-- and filtered in Python, where older unclaimable runs could hide every runnable one):
-- its queue is open, its workflow served (:served maps names to the list of versions the
-- worker registers; a run without a version is served by any registration of its name:
-- versions route only when set), and it is queued, running with no owner, an
-- expired lease or an owner in :dead (this host's owners found dead in Python), or parked
-- and due. The status term matches the partial index runs_claimable, so finished runs
-- are never read.
SELECT run_id, workflow, version, prompt_version, queue, input, input_digest, codec_version,
       status, generation, fencing_token, owner, lease_expires_at, starts,
       starts_without_progress, outcome, error_type, error_message, park_reason, wake_at,
       created_at, updated_at, finished_at, incarnation, cancel_requested_at, cancel_reason,
       records_at_last_start
FROM runs
WHERE status IN ('queued', 'running', 'parked')
  AND queue IN (SELECT value FROM json_each(:queues))
  AND EXISTS (SELECT 1 FROM json_each(:served) AS s
              WHERE s.key = runs.workflow
                AND (runs.version IS NULL
                     OR EXISTS (SELECT 1 FROM json_each(s.value) AS v
                                WHERE v.value = runs.version)))
  AND (status = 'queued'
       OR (status = 'running' AND (owner IS NULL OR lease_expires_at <= :now
                                   OR owner IN (SELECT value FROM json_each(:dead))))
       OR (status = 'parked' AND wake_at IS NOT NULL AND wake_at <= :now))
ORDER BY created_at, run_id
LIMIT 1;

-- name: same_host_owners
-- The owners holding live leases on this host (:pattern from Owner.host_pattern): the
-- only ones whose liveness Python can judge (their pids are local). The IN term lets
-- the planner use runs_claimable, which holds no finished run.
SELECT DISTINCT owner FROM runs
WHERE status IN ('queued', 'running', 'parked') AND status = 'running'
  AND lease_expires_at > :now AND owner LIKE :pattern ESCAPE '\'
LIMIT :limit;

-- name: own_claim
-- The run this owner claimed at :now, if any: a claim stamps updated_at and the lease
-- with its own time, so a claim_next run again after an unknown commit finds the run its
-- first attempt took instead of taking a second one.
SELECT run_id, workflow, version, prompt_version, queue, input, input_digest, codec_version,
       status, generation, fencing_token, owner, lease_expires_at, starts,
       starts_without_progress, outcome, error_type, error_message, park_reason, wake_at,
       created_at, updated_at, finished_at, incarnation, cancel_requested_at, cancel_reason
FROM runs
WHERE owner = :owner AND status = 'running' AND updated_at = :now
  AND lease_expires_at = :lease_expires_at
ORDER BY run_id
LIMIT 1;
