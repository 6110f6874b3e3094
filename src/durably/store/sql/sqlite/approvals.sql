-- SQLite queries of the store's approvals: requests, decisions, expiry.
-- Parameters are named (:name).

-- name: put_approval
-- A request's row, written with the park that waits on it; the same request parked again
-- (a replay) keeps its row, decided or not.
INSERT INTO approvals (run_id, request_id, action, args, digest, requested_at, expires_at)
VALUES (:run_id, :request_id, :action, :args, :digest, :requested_at, :expires_at)
ON CONFLICT (run_id, request_id) DO NOTHING;

-- name: get_approval
SELECT run_id, request_id, action, args, digest, requested_at, expires_at, decided_at,
       outcome, by_name, note
FROM approvals WHERE run_id = :run_id AND request_id = :request_id;

-- name: pending_approvals
-- Undecided requests of runs still going (a run that ended, cancelled say, leaves its
-- request undecided for ever: nobody waits for it; nor does a run being cancelled, which
-- unwinds when next driven), oldest first.
SELECT a.run_id, a.request_id, a.action, a.args, a.digest, a.requested_at, a.expires_at,
       a.decided_at, a.outcome, a.by_name, a.note
FROM approvals a JOIN runs r ON r.run_id = a.run_id
WHERE a.outcome IS NULL
  AND r.status NOT IN ('completed', 'failed', 'cancelled', 'continued')
  AND r.cancel_requested_at IS NULL
  AND (:run_id IS NULL OR a.run_id = :run_id)
ORDER BY a.requested_at, a.run_id, a.request_id
LIMIT :limit;

-- name: lock_run_status
-- The run a person decides for: its status and whether a cancel was asked for (its run
-- unwinds: nobody uses a decision). The caller's BEGIN IMMEDIATE holds the lock.
SELECT status, cancel_requested_at IS NOT NULL FROM runs WHERE run_id = :run_id;

-- name: decide_approval
UPDATE approvals
SET outcome = :outcome, by_name = :by, note = :note, decided_at = :now
WHERE run_id = :run_id AND request_id = :request_id AND outcome IS NULL;

-- name: expire_approval
-- The run's driver found the request past its expiry: the expiry is the decision, taken
-- once (a person's decision committed first wins instead).
UPDATE approvals
SET outcome = 'expired', decided_at = expires_at
WHERE run_id = :run_id AND request_id = :request_id AND outcome IS NULL
  AND expires_at IS NOT NULL AND expires_at <= :now;

-- name: wake_for_approval
-- A decision wakes the run parked on it (a run not parked yet sees the decision when it
-- parks: park_run checks for it).
-- Due by the time it parked, if the decider's clock says later: a decider whose clock
-- runs ahead of the workers' must not leave the run parked for the difference (as a
-- signal's wake); a wake already due sooner stays.
UPDATE runs SET wake_at = min(:now, updated_at), updated_at = :now
WHERE run_id = :run_id AND status = 'parked'
  AND (wake_at IS NULL OR wake_at > min(:now, updated_at));
