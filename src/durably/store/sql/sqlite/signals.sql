-- SQLite queries of the store's signals: send, number, take.
-- Parameters are named (:name).

-- name: lock_run_for_signal
-- The run's status, under the caller's BEGIN IMMEDIATE (signals of one run are numbered
-- one at a time because the database has one writer).
SELECT status FROM runs WHERE run_id = :run_id;

-- name: next_signal_seq
-- The run's next signal number (1, 2, ...), read inside the write transaction that
-- inserts it (SQLite's single writer is the run's lock).
SELECT coalesce(max(seq), 0) + 1 FROM signals WHERE run_id = :run_id;

-- name: insert_signal
INSERT INTO signals (run_id, seq, name, data, sent_at)
VALUES (:run_id, :seq, :name, :data, :now);

-- name: taken_signal
-- The signal a wait at :consumer consumed already (its reply was lost, or the process
-- died before the wait's record was written): handed out again, never a second one.
SELECT seq, data FROM signals
WHERE run_id = :run_id AND name = :name AND consumed_by = :consumer
ORDER BY seq LIMIT 1;

-- name: oldest_signal
-- FIFO per name: the oldest signal of :name nobody consumed yet.
SELECT seq, data FROM signals
WHERE run_id = :run_id AND name = :name AND consumed_by IS NULL
ORDER BY seq LIMIT 1;

-- name: consume_signal
UPDATE signals SET consumed_by = :consumer WHERE run_id = :run_id AND seq = :seq;

-- name: release_renamed_signal
-- A wait at :consumer now asks for another name: what it took under the old name was
-- never recorded (the process died first, then a deploy changed the wait), so it goes
-- back to its queue instead of staying taken by a wait that no longer exists.
UPDATE signals SET consumed_by = NULL
WHERE run_id = :run_id AND consumed_by = :consumer AND name <> :name;

-- name: wake_for_signal
-- A run parked waiting for this signal's name (one of those in its wait_signal array) is
-- due now (a worker's next poll takes it).
-- Due by the time it parked, if the sender's clock says later: a sender whose clock runs
-- ahead of the workers' must not leave the run parked for the difference.
UPDATE runs SET wake_at = min(:now, updated_at), updated_at = :now
WHERE run_id = :run_id AND status = 'parked' AND wait_signal IS NOT NULL
  AND EXISTS (SELECT 1 FROM json_each(runs.wait_signal) WHERE value = :name)
  AND (wake_at IS NULL OR wake_at > min(:now, updated_at));

-- name: signal_sent
-- The signal.received event of an earlier attempt of this very send (its dedupe names
-- the send): a retry after an unknown commit outcome returns that signal's number.
SELECT data FROM events WHERE run_id = :run_id AND dedupe = :dedupe;

-- name: signals_pending
-- How many signals of the run nobody consumed yet, counted up to :pending_max (a send
-- past SIGNALS_PENDING_MAX is refused: a sender looping faster than the run waits must
-- not grow the table without bound).
SELECT count(*) FROM (SELECT 1 FROM signals
                      WHERE run_id = :run_id AND consumed_by IS NULL LIMIT :pending_max) AS pending;
