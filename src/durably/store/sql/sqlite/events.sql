-- SQLite queries of the store's events: the run's event stream.
-- Parameters are named (:name).

-- name: insert_event
-- The event takes the cursor :offset past the run's newest (read under the write lock
-- the transaction holds). One already stored under its dedupe (a write repeated after an
-- unknown outcome, or an emit replayed) is skipped: stored once, and no cursor spent.
INSERT INTO events (run_id, cursor, kind, position, data, at, dedupe)
SELECT :run_id, last_event + :offset, :kind, :position, :data, :at, :dedupe
FROM runs WHERE run_id = :run_id
ON CONFLICT (run_id, dedupe) DO NOTHING;

-- name: advance_last_event
UPDATE runs SET last_event = last_event + :added WHERE run_id = :run_id;

-- name: run_status
SELECT status FROM runs WHERE run_id = :run_id;

-- name: read_events
SELECT cursor, kind, position, at, data FROM events
WHERE run_id = :run_id AND cursor > :after
ORDER BY cursor
LIMIT :limit;
