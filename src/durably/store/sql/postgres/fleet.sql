-- PostgreSQL queries of the store's fleet: the workers table, owner locks, the server clock.
-- Parameters are psycopg named placeholders
-- (%(name)s). Parameters that can be NULL or that sit in a SELECT list carry an explicit
-- cast: PostgreSQL cannot infer the type of an untyped NULL there.

-- name: hold_owner_lock
-- Held for the life of the owner lock's session: while it is held, the owner's process
-- is alive (and connected). Keyed on the schema and the owner string; a hash collision
-- only makes a dead owner look alive (its lease then expires), never the reverse. Shared:
-- every engine of one process (one owner) holds it at once, each on its own session, and
-- the owner shows alive while any of them does; the probe below takes it exclusively.
SELECT pg_advisory_lock_shared(hashtext('durably.owner.' || current_schema()),
                               hashtext(%(owner)s));

-- name: owner_lock_free
-- True when nobody holds the owner's lock; the transaction-level lock taken to find out
-- is released when the (autocommit) statement ends.
SELECT pg_try_advisory_xact_lock(hashtext('durably.owner.' || current_schema()),
                                 hashtext(%(owner)s));

-- name: ping
SELECT 1;

-- name: db_time
SELECT extract(epoch FROM clock_timestamp())::double precision;

-- name: beat_worker
-- A worker's row, written at its start and on every beat; started_at stays its first.
INSERT INTO workers (owner, queues, started_at, beat_at, expires_at)
VALUES (%(owner)s, %(queues)s, %(now)s, %(now)s, %(expires_at)s)
ON CONFLICT (owner) DO UPDATE
SET queues = excluded.queues, beat_at = excluded.beat_at, expires_at = excluded.expires_at;

-- name: prune_workers
DELETE FROM workers WHERE expires_at < %(before)s;

-- name: drop_worker
DELETE FROM workers WHERE owner = %(owner)s;

-- name: live_workers
SELECT owner, queues FROM workers WHERE expires_at > %(now)s ORDER BY owner LIMIT %(limit)s;
