-- PostgreSQL queries of the store's events: the run's event stream.
-- Parameters are psycopg named placeholders
-- (%(name)s). Parameters that can be NULL or that sit in a SELECT list carry an explicit
-- cast: PostgreSQL cannot infer the type of an untyped NULL there.

-- name: write_events
-- Numbers the events after the run's newest and inserts them, in one round trip. The
-- run row is locked first (FOR NO KEY UPDATE, held to commit), so a run's events commit
-- in cursor order: a reader going by cursor never sees a later event before an earlier
-- one. An event already stored (same dedupe: a write repeated after an unknown outcome,
-- an emit replayed) is skipped. Followers of the run are woken at commit.
WITH locked AS (
    SELECT last_event FROM runs WHERE run_id = %(run_id)s FOR NO KEY UPDATE
), fresh AS (
    SELECT e.kind, e.position, e.data, e.at, e.dedupe, e.ord
    -- {events}: the events' rows (kind, position, data, at, dedupe, ord), written in
    -- by PostgresStore._events_sql: a VALUES list for a few events, arrays for many.
    FROM {events} AS e (kind, position, data, at, dedupe, ord)
    -- A scalar subquery, not NOT EXISTS: the planner cannot turn it into a hash anti
    -- join, which in a generic plan (statistics that say a run has few events) hashes
    -- every event of the run on every step. Each event is one index probe.
    WHERE (SELECT 1 FROM events x
           WHERE x.run_id = %(run_id)s AND x.dedupe = e.dedupe) IS NULL
), inserted AS (
    INSERT INTO events (run_id, cursor, kind, position, data, at, dedupe)
    SELECT %(run_id)s, locked.last_event + row_number() OVER (ORDER BY fresh.ord),
           fresh.kind, fresh.position, fresh.data, fresh.at, fresh.dedupe
    FROM fresh, locked
    RETURNING cursor
), bumped AS (
    UPDATE runs SET last_event = (SELECT max(cursor) FROM inserted)
    WHERE run_id = %(run_id)s AND EXISTS (SELECT 1 FROM inserted)
    RETURNING run_id
)
SELECT pg_notify(%(events_channel)s, run_id) FROM bumped;

-- name: run_status
SELECT status FROM runs WHERE run_id = %(run_id)s;

-- name: read_events
SELECT cursor, kind, position, at, data FROM events
WHERE run_id = %(run_id)s AND cursor > %(after)s
ORDER BY cursor
LIMIT %(limit)s;
