-- PostgreSQL queries of the stream writer (durably.store.streamwriter): stream-only
-- events written at once on the writer's own connection (synchronous_commit off).
-- Parameters are psycopg named placeholders (%(name)s).

-- name: stream_token
-- The run's fencing token, with the run row locked to commit (FOR NO KEY UPDATE, as
-- write_events takes it next): a claim cannot slip between the check and the insert, so a
-- series of deltas from a process that no longer owns the run is dropped.
SELECT fencing_token FROM runs WHERE run_id = %(run_id)s FOR NO KEY UPDATE;
