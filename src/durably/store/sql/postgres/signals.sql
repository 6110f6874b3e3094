-- PostgreSQL queries of the store's signals: send, number, take.
-- Parameters are psycopg named placeholders
-- (%(name)s). Parameters that can be NULL or that sit in a SELECT list carry an explicit
-- cast: PostgreSQL cannot infer the type of an untyped NULL there.

-- name: lock_run_for_signal
-- The run row locked to commit: signals of one run are numbered one at a time, and a
-- park (which checks for a waiting signal under the same lock) sees this one or wakes.
SELECT status FROM runs WHERE run_id = %(run_id)s FOR NO KEY UPDATE;

-- name: next_signal_seq
SELECT coalesce(max(seq), 0) + 1 FROM signals WHERE run_id = %(run_id)s;

-- name: insert_signal
INSERT INTO signals (run_id, seq, name, data, sent_at)
VALUES (%(run_id)s, %(seq)s, %(name)s, %(data)s, %(now)s);

-- name: taken_signal
-- The signal a wait at %(consumer)s consumed already (its reply was lost, or the process
-- died before the wait's record was written): handed out again, never a second one.
SELECT seq, data FROM signals
WHERE run_id = %(run_id)s AND name = %(name)s AND consumed_by = %(consumer)s
ORDER BY seq LIMIT 1;

-- name: oldest_signal
-- FIFO per name: the oldest signal of %(name)s nobody consumed yet.
SELECT seq, data FROM signals
WHERE run_id = %(run_id)s AND name = %(name)s AND consumed_by IS NULL
ORDER BY seq LIMIT 1;

-- name: consume_signal
UPDATE signals SET consumed_by = %(consumer)s WHERE run_id = %(run_id)s AND seq = %(seq)s;

-- name: release_renamed_signal
-- A wait at %(consumer)s now asks for another name: what it took under the old name was
-- never recorded (the process died first, then a deploy changed the wait), so it goes
-- back to its queue instead of staying taken by a wait that no longer exists.
UPDATE signals SET consumed_by = NULL
WHERE run_id = %(run_id)s AND consumed_by = %(consumer)s AND name <> %(name)s;

-- name: wake_for_signal
-- A run parked waiting for this signal's name (one of those in its wait_signal array) is
-- due now; the caller then notifies the
-- workers in the same transaction (delivered at commit), so one claims it at once.
-- Due by the time it parked, if the sender's clock says later: a sender whose clock runs
-- ahead of the workers' must not leave the run parked for the difference.
UPDATE runs SET wake_at = least(%(now)s::double precision, updated_at), updated_at = %(now)s
WHERE run_id = %(run_id)s AND status = 'parked'
  AND wait_signal::jsonb @> jsonb_build_array(%(name)s::text)
  AND (wake_at IS NULL OR wake_at > least(%(now)s::double precision, updated_at));

-- name: signal_sent
-- The signal.received event of an earlier attempt of this very send (its dedupe names
-- the send): a retry after an unknown commit outcome returns that signal's number.
SELECT data FROM events WHERE run_id = %(run_id)s AND dedupe = %(dedupe)s;

-- name: signals_pending
-- How many signals of the run nobody consumed yet, counted up to :pending_max (a send
-- past SIGNALS_PENDING_MAX is refused: a sender looping faster than the run waits must
-- not grow the table without bound).
SELECT count(*) FROM (SELECT 1 FROM signals
                      WHERE run_id = %(run_id)s AND consumed_by IS NULL LIMIT %(pending_max)s) AS pending;
