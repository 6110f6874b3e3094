-- SQLite queries of the store's fleet: the workers table, owner locks, the server clock.
-- Parameters are named (:name).

-- name: beat_worker
-- A worker's row, written at its start and on every beat; started_at stays its first.
INSERT INTO workers (owner, queues, started_at, beat_at, expires_at)
VALUES (:owner, :queues, :now, :now, :expires_at)
ON CONFLICT (owner) DO UPDATE
SET queues = excluded.queues, beat_at = excluded.beat_at, expires_at = excluded.expires_at;

-- name: prune_workers
DELETE FROM workers WHERE expires_at < :before;

-- name: drop_worker
DELETE FROM workers WHERE owner = :owner;

-- name: live_workers
SELECT owner, queues FROM workers WHERE expires_at > :now ORDER BY owner LIMIT :limit;
