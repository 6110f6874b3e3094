-- PostgreSQL queries of the store's approvals: requests, decisions, expiry.
-- Parameters are psycopg named placeholders
-- (%(name)s). Parameters that can be NULL or that sit in a SELECT list carry an explicit
-- cast: PostgreSQL cannot infer the type of an untyped NULL there.

-- name: put_approval
-- A request's row, written with the park that waits on it; the same request parked again
-- (a replay) keeps its row, decided or not.
INSERT INTO approvals (run_id, request_id, action, args, digest, requested_at, expires_at)
VALUES (%(run_id)s, %(request_id)s, %(action)s, %(args)s, %(digest)s, %(requested_at)s,
        %(expires_at)s)
ON CONFLICT (run_id, request_id) DO NOTHING;

-- name: get_approval
SELECT run_id, request_id, action, args, digest, requested_at, expires_at, decided_at,
       outcome, by_name, note
FROM approvals WHERE run_id = %(run_id)s AND request_id = %(request_id)s;

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
  AND (%(run_id)s::text IS NULL OR a.run_id = %(run_id)s::text)
ORDER BY a.requested_at, a.run_id, a.request_id
LIMIT %(limit)s;

-- name: lock_run_status
-- The run row locked to commit (a decision and a park, or a cancel, of the same run take
-- turns), with whether a cancel was asked for (its run unwinds: nobody uses a decision).
SELECT status, cancel_requested_at IS NOT NULL FROM runs WHERE run_id = %(run_id)s
FOR NO KEY UPDATE;

-- name: decide_approval
UPDATE approvals
SET outcome = %(outcome)s, by_name = %(by)s, note = %(note)s, decided_at = %(now)s
WHERE run_id = %(run_id)s AND request_id = %(request_id)s AND outcome IS NULL;

-- name: expire_approval
-- The run's driver found the request past its expiry: the expiry is the decision, taken
-- once (a person's decision committed first wins instead).
UPDATE approvals
SET outcome = 'expired', decided_at = expires_at
WHERE run_id = %(run_id)s AND request_id = %(request_id)s AND outcome IS NULL
  AND expires_at IS NOT NULL AND expires_at <= %(now)s;

-- name: wake_for_approval
-- A decision wakes the run parked on it, and the workers (a run not parked yet sees the
-- decision when it parks: park_run checks for it).
-- Due by the time it parked, if the decider's clock says later: a decider whose clock
-- runs ahead of the workers' must not leave the run parked for the difference (as a
-- signal's wake); a wake already due sooner stays.
WITH woken AS (
    UPDATE runs SET wake_at = least(%(now)s::double precision, updated_at), updated_at = %(now)s
    WHERE run_id = %(run_id)s AND status = 'parked'
      AND (wake_at IS NULL OR wake_at > least(%(now)s::double precision, updated_at))
    RETURNING 1
)
SELECT pg_notify(%(channel)s, '') FROM woken;
