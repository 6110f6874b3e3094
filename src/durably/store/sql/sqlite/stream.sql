-- SQLite queries of the stream writer (durably.store.streamwriter): stream-only events
-- written at once on the writer's own connection. Parameters are named (:name).

-- name: stream_token
-- The run's fencing token, read under the write lock the writer's transaction holds: a
-- series of deltas from a process that no longer owns the run is dropped.
SELECT fencing_token FROM runs WHERE run_id = :run_id;
