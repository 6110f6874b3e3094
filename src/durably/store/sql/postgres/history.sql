-- PostgreSQL queries of the store's history: step records and blobs, append, finish, park.
-- Parameters are psycopg named placeholders
-- (%(name)s). Parameters that can be NULL or that sit in a SELECT list carry an explicit
-- cast: PostgreSQL cannot infer the type of an untyped NULL there.

-- name: park_run
-- The run gives up its process to wait (fenced; the row is locked by lock_token first, in
-- a statement of its own, so a signal or cancel committed while this transaction waited
-- for the row is seen here). It wakes at %(wake_at)s, or at once when a cancel was asked
-- for, a signal it waits for was sent, or an approval it waits on was decided before
-- this park (the wake-up would otherwise be lost: whoever sent it saw the run running,
-- not parked). %(wait_signal)s and %(wait_approval)s are JSON arrays (names, request
-- ids), or NULL: a run whose gather branches parked waits on several at once.
UPDATE runs
SET status = 'parked', owner = NULL, lease_expires_at = NULL,
    park_reason = %(park_reason)s::text, wait_signal = %(wait_signal)s::text,
    wake_at = CASE
        WHEN cancel_requested_at IS NOT NULL
          OR (%(wait_signal)s::text IS NOT NULL
              AND EXISTS (SELECT 1 FROM signals s
                          WHERE s.run_id = runs.run_id
                            AND s.name IN (SELECT jsonb_array_elements_text(
                                               %(wait_signal)s::text::jsonb))
                            AND s.consumed_by IS NULL))
          OR (%(wait_approval)s::text IS NOT NULL
              AND EXISTS (SELECT 1 FROM approvals a
                          WHERE a.run_id = runs.run_id
                            AND a.request_id IN (SELECT jsonb_array_elements_text(
                                                     %(wait_approval)s::text::jsonb))
                            AND a.outcome IS NOT NULL))
        THEN %(now)s::double precision
        ELSE %(wake_at)s::double precision
    END,
    updated_at = %(now)s
WHERE run_id = %(run_id)s AND fencing_token = %(token)s
RETURNING wake_at;

-- name: load_history
SELECT position, kind, name, input_digest, status, output, error_type, error_message,
       attempts, started_at, finished_at, usage_tokens, usage_cost_usd, inputs
FROM steps WHERE run_id = %(run_id)s AND generation = %(generation)s;

-- name: load_record
-- One position of the run's current generation (to explain a refused append).
SELECT s.position, s.kind, s.name, s.input_digest, s.status, s.output, s.error_type,
       s.error_message, s.attempts, s.started_at, s.finished_at, s.usage_tokens,
       s.usage_cost_usd, s.inputs
FROM steps s JOIN runs r ON r.run_id = s.run_id AND r.generation = s.generation
WHERE s.run_id = %(run_id)s AND s.position = %(position)s;

-- name: append_record
-- Fenced upsert in one statement: writes only while the token is current; a result may
-- replace an intent or a wait in progress (``waiting``), never another result. FOR KEY
-- SHARE holds the run row until commit, so a concurrent claim (FOR UPDATE) waits for
-- this append instead of loading a history that this append then changes; an append
-- that waited re-reads the row and is refused when the claim has raised the token.
INSERT INTO steps (run_id, generation, position, kind, name, input_digest, status, output,
                   error_type, error_message, attempts, started_at, finished_at,
                   usage_tokens, usage_cost_usd, inputs)
SELECT runs.run_id, runs.generation, %(position)s::text, %(kind)s::text, %(name)s::text,
       %(input_digest)s::text, %(status)s::text, %(output)s::text, %(error_type)s::text,
       %(error_message)s::text, %(attempts)s::integer, %(started_at)s::double precision,
       %(finished_at)s::double precision, %(usage_tokens)s::bigint,
       %(usage_cost_usd)s::double precision, %(inputs)s::text
FROM runs WHERE runs.run_id = %(run_id)s AND runs.fencing_token = %(token)s
FOR KEY SHARE OF runs
ON CONFLICT (run_id, generation, position) DO UPDATE
-- Kind, name and digest change only over a wait in progress (a result over its
-- intent has the same), and so does the start (a result keeps its intent's): a
-- cancel delivered at a timer records its halt marker there, stored as written.
SET kind = excluded.kind, name = excluded.name, input_digest = excluded.input_digest,
    started_at = CASE WHEN steps.status = 'waiting' THEN excluded.started_at
                      ELSE steps.started_at END,
    status = excluded.status, output = excluded.output, error_type = excluded.error_type,
    error_message = excluded.error_message, attempts = excluded.attempts,
    finished_at = excluded.finished_at, usage_tokens = excluded.usage_tokens,
    usage_cost_usd = excluded.usage_cost_usd,
    -- A result keeps the inputs its intent recorded unless it brings its own.
    inputs = coalesce(excluded.inputs, steps.inputs)
WHERE steps.status = 'intent'
   -- A wait in progress gives way to its result, or to itself (the same wake time: a
   -- write retried after an unknown outcome); never to an intent or another wake time.
   OR (steps.status = 'waiting'
       AND (excluded.status IN ('ok', 'failed')
            OR (excluded.status = 'waiting' AND excluded.output = steps.output)))
-- Whether a cancel was asked for, read in the same statement: every step boundary checks
-- the flag at no extra round trip (Store.append returns it). No row: the write was
-- refused.
RETURNING (SELECT r.cancel_requested_at IS NOT NULL FROM runs r
           WHERE r.run_id = %(run_id)s);

-- name: check_token
SELECT fencing_token, cancel_requested_at IS NOT NULL FROM runs WHERE run_id = %(run_id)s;

-- name: lock_token
-- The token of a run whose row this transaction locks to its commit (a claim waits),
-- and whether a cancel was asked for.
SELECT fencing_token, cancel_requested_at IS NOT NULL FROM runs WHERE run_id = %(run_id)s
FOR NO KEY UPDATE;

-- name: finish_run
-- A finished run frees a slot of its queue: wake waiting workers. One row when fenced in.
WITH finished AS (
UPDATE runs
SET status = %(status)s, outcome = %(outcome)s::text, error_type = %(error_type)s::text,
    error_message = %(error_message)s::text, owner = NULL, lease_expires_at = NULL,
    park_reason = %(park_reason)s::text, finished_at = %(finished_at)s, updated_at = %(now)s
WHERE run_id = %(run_id)s AND fencing_token = %(token)s
RETURNING 1
)
SELECT pg_notify(%(channel)s, '') FROM finished;

-- name: append_with_events
-- append_record and write_events in one statement, so the common write (one step record
-- and its events) stays one autocommit round trip; a record with blobs is not written
-- here (its blobs go first, in a transaction). The events are written only when the
-- record was (a refused append writes nothing); returns the number of records written
-- and whether a cancel was asked for.
WITH appended AS (
    INSERT INTO steps (run_id, generation, position, kind, name, input_digest, status,
                       output, error_type, error_message, attempts, started_at,
                       finished_at, usage_tokens, usage_cost_usd, inputs)
    SELECT runs.run_id, runs.generation, %(position)s::text, %(kind)s::text, %(name)s::text,
           %(input_digest)s::text, %(status)s::text, %(output)s::text, %(error_type)s::text,
           %(error_message)s::text, %(attempts)s::integer, %(started_at)s::double precision,
           %(finished_at)s::double precision, %(usage_tokens)s::bigint,
           %(usage_cost_usd)s::double precision, %(inputs)s::text
    FROM runs WHERE runs.run_id = %(run_id)s AND runs.fencing_token = %(token)s
    FOR KEY SHARE OF runs
    ON CONFLICT (run_id, generation, position) DO UPDATE
    -- Kind, name and digest change only over a wait in progress (a result over its
-- intent has the same), and so does the start (a result keeps its intent's): a
-- cancel delivered at a timer records its halt marker there, stored as written.
SET kind = excluded.kind, name = excluded.name, input_digest = excluded.input_digest,
    started_at = CASE WHEN steps.status = 'waiting' THEN excluded.started_at
                      ELSE steps.started_at END,
    status = excluded.status, output = excluded.output, error_type = excluded.error_type,
        error_message = excluded.error_message, attempts = excluded.attempts,
        finished_at = excluded.finished_at, usage_tokens = excluded.usage_tokens,
        usage_cost_usd = excluded.usage_cost_usd,
        -- As append_record: a result keeps its intent's inputs unless it brings its own.
        inputs = coalesce(excluded.inputs, steps.inputs)
    WHERE steps.status = 'intent'
       OR (steps.status = 'waiting'
           AND (excluded.status IN ('ok', 'failed')
                OR (excluded.status = 'waiting' AND excluded.output = steps.output)))
    RETURNING 1
), locked AS (
    SELECT last_event FROM runs
    WHERE run_id = %(run_id)s AND EXISTS (SELECT 1 FROM appended)
    FOR NO KEY UPDATE
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
SELECT (SELECT count(*) FROM appended),
       (SELECT count(pg_notify(%(events_channel)s, run_id)) FROM bumped),
       -- Whether a cancel was asked for (as append_record returns it).
       (SELECT cancel_requested_at IS NOT NULL FROM runs WHERE run_id = %(run_id)s);

-- name: put_blob
-- A payload by content hash: each distinct value is stored once. Citing a blob already
-- stored updates its row (touches + 1): the update takes the row's lock, which the prune
-- sweep's delete takes too, so the two serialise, and the sweep deletes only a blob whose
-- count did not change since it looked for citations (see store/retention.py).
INSERT INTO blobs (digest, data, size, created_at)
VALUES (%(digest)s, %(data)s, %(size)s, %(now)s)
ON CONFLICT (digest) DO UPDATE SET touches = blobs.touches + 1;

-- name: get_blobs
SELECT digest, data FROM blobs WHERE digest = ANY(%(digests)s::text[]);
