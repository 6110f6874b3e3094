-- Named queries of the PostgreSQL store. Parameters are psycopg named placeholders
-- (%(name)s). Parameters that can be NULL or that sit in a SELECT list carry an explicit
-- cast: PostgreSQL cannot infer the type of an untyped NULL there.

-- name: meta_lock
-- Serialises migrations of one schema across every process that opens it at once; the
-- lock is per schema (keyed on its name) and ends with the transaction.
SELECT pg_advisory_xact_lock(hashtext('durably.migrate'), hashtext(current_schema()));

-- name: current_schema
SELECT current_schema();

-- name: own_tables
-- durably's own tables in the store's schema; other tables of a shared schema are none of
-- durably's business.
SELECT table_name FROM information_schema.tables
WHERE table_schema = current_schema()
  AND table_name IN ('durably_meta', 'runs', 'steps', 'signals', 'events', 'blobs');

-- name: get_meta
SELECT value FROM durably_meta WHERE key = %(key)s;

-- name: set_meta
INSERT INTO durably_meta (key, value) VALUES (%(key)s, %(value)s)
ON CONFLICT (key) DO UPDATE SET value = excluded.value;

-- name: insert_run
-- Creates the run and, in the same statement, wakes waiting workers (see notify_work);
-- returns a row only when the run was created.
WITH created AS (
INSERT INTO runs (run_id, workflow, version, prompt_version, queue, input, input_digest,
                  codec_version, incarnation, status, created_at, updated_at)
VALUES (%(run_id)s, %(workflow)s, %(version)s, %(prompt_version)s, %(queue)s, %(input)s,
        %(input_digest)s, %(codec_version)s, %(incarnation)s, 'queued', %(now)s, %(now)s)
ON CONFLICT (run_id) DO NOTHING
RETURNING 1
)
SELECT pg_notify(%(channel)s, '') FROM created;

-- name: get_run
SELECT run_id, workflow, version, prompt_version, queue, input, input_digest, codec_version,
       status, generation, fencing_token, owner, lease_expires_at, starts,
       starts_without_progress, outcome, error_type, error_message, park_reason, wake_at,
       created_at, updated_at, finished_at, incarnation, cancel_requested_at, cancel_reason
FROM runs WHERE run_id = %(run_id)s;

-- name: lock_run_for_claim
-- The run row locked for the claim. FOR UPDATE also waits for any append still holding
-- its KEY SHARE lock, so no append of the previous owner lands after the claim.
SELECT run_id, workflow, version, prompt_version, queue, input, input_digest, codec_version,
       status, generation, fencing_token, owner, lease_expires_at, starts,
       starts_without_progress, outcome, error_type, error_message, park_reason, wake_at,
       created_at, updated_at, finished_at, incarnation,
       cancel_requested_at, cancel_reason, records_at_last_start
FROM runs WHERE run_id = %(run_id)s
FOR UPDATE;

-- name: count_records
-- A statement of its own after the lock: in READ COMMITTED it then sees every append
-- that committed while the claim waited for the row.
SELECT count(*) FROM steps
WHERE run_id = %(run_id)s AND generation = %(generation)s AND status <> 'intent';

-- name: list_runs
-- One page of runs, newest first (created_at DESC, then run_id), keyset-paged: after_at
-- and after_id are the last run of the page before (NULL for the first page), so a run
-- created while pages are read never shifts the ones after it. The range on created_at
-- lets runs_by_created serve the order (only runs created at the same instant are
-- sorted); statuses is an array of statuses or NULL; search a substring of run_id
-- (strpos: case-sensitive, no wildcards).
SELECT run_id, workflow, version, prompt_version, queue, input, input_digest, codec_version,
       status, generation, fencing_token, owner, lease_expires_at, starts,
       starts_without_progress, outcome, error_type, error_message, park_reason, wake_at,
       created_at, updated_at, finished_at, incarnation, cancel_requested_at, cancel_reason
FROM runs
WHERE created_at <= coalesce(%(after_at)s::double precision, 'Infinity'::double precision)
  AND (%(after_at)s::double precision IS NULL OR created_at < %(after_at)s::double precision
       OR run_id > %(after_id)s::text)
  AND (%(statuses)s::text[] IS NULL OR status = ANY(%(statuses)s::text[]))
  AND (%(workflow)s::text IS NULL OR workflow = %(workflow)s::text)
  AND (%(version)s::text IS NULL OR version = %(version)s::text)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(search)s::text IS NULL OR strpos(run_id, %(search)s::text) > 0)
  AND (%(since)s::double precision IS NULL OR created_at >= %(since)s::double precision)
ORDER BY created_at DESC, run_id
LIMIT %(limit)s;

-- name: runs_by_version
-- Runs not yet finished, counted per workflow, version and status: what each version's
-- workers still have to drive before they can be stopped.
SELECT workflow, version, status, count(*) FROM runs
WHERE status NOT IN ('completed', 'failed', 'cancelled', 'continued')
GROUP BY workflow, version, status
ORDER BY workflow, version NULLS FIRST, status;

-- name: count_runs
-- How many runs of each status (the count line of `durably runs list`), with the filters
-- of list_runs other than the status and the cursor.
SELECT status, count(*) FROM runs
WHERE (%(workflow)s::text IS NULL OR workflow = %(workflow)s::text)
  AND (%(since)s::double precision IS NULL OR created_at >= %(since)s::double precision)
  AND (%(version)s::text IS NULL OR version = %(version)s::text)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(search)s::text IS NULL OR strpos(run_id, %(search)s::text) > 0)
GROUP BY status;

-- name: claim_run
UPDATE runs
SET fencing_token = fencing_token + 1, owner = %(owner)s,
    lease_expires_at = %(lease_expires_at)s, status = 'running', park_reason = NULL,
    wake_at = NULL, wait_signal = NULL, starts = starts + 1,
    starts_without_progress = %(starts_without_progress)s,
    records_at_last_start = %(records)s, updated_at = %(now)s
WHERE run_id = %(run_id)s AND fencing_token = %(expected_token)s
RETURNING run_id, workflow, version, prompt_version, queue, input, input_digest,
          codec_version, status, generation, fencing_token, owner, lease_expires_at, starts,
          starts_without_progress, outcome, error_type, error_message, park_reason, wake_at,
          created_at, updated_at, finished_at, incarnation, cancel_requested_at, cancel_reason;

-- name: quarantine_run
UPDATE runs
SET status = 'quarantined', owner = NULL, lease_expires_at = NULL, updated_at = %(now)s
WHERE run_id = %(run_id)s AND fencing_token = %(expected_token)s;

-- name: renew_lease
UPDATE runs SET lease_expires_at = %(lease_expires_at)s
WHERE run_id = %(run_id)s AND fencing_token = %(token)s AND owner IS NOT NULL;

-- name: release_run
-- A released run may be runnable again (or frees a queue slot): wake waiting workers.
WITH released AS (
UPDATE runs
SET owner = NULL, lease_expires_at = NULL, status = coalesce(%(status)s::text, status),
    park_reason = %(park_reason)s::text, wake_at = %(wake_at)s::double precision,
    wait_signal = NULL, updated_at = %(now)s
WHERE run_id = %(run_id)s AND fencing_token = %(token)s
RETURNING 1
)
SELECT pg_notify(%(channel)s, '') FROM released;

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

-- name: drop_intents
DELETE FROM steps
WHERE run_id = %(run_id)s AND generation = %(generation)s AND status = 'intent'
  AND (%(position)s::text IS NULL OR position = %(position)s::text);

-- name: drop_record
-- A person's retry: the intent or failure at one position goes, so that step runs again
-- (under the same key). A result is never dropped.
DELETE FROM steps
WHERE run_id = %(run_id)s AND generation = %(generation)s AND position = %(position)s
  AND status IN ('intent', 'failed');

-- name: insert_record
-- A copied record of a fork's new history (not fenced: the run was created in the same
-- transaction and nobody can hold it yet).
INSERT INTO steps (run_id, generation, position, kind, name, input_digest, status, output,
                   error_type, error_message, attempts, started_at, finished_at,
                   usage_tokens, usage_cost_usd, inputs)
VALUES (%(run_id)s, 0, %(position)s, %(kind)s, %(name)s, %(input_digest)s, %(status)s,
        %(output)s, %(error_type)s, %(error_message)s, %(attempts)s, %(started_at)s,
        %(finished_at)s, %(usage_tokens)s, %(usage_cost_usd)s, %(inputs)s);

-- name: resolve_intent
UPDATE steps SET status = 'ok', output = %(output)s, finished_at = %(now)s
WHERE run_id = %(run_id)s AND generation = %(generation)s AND position = %(position)s
  AND status = 'intent';

-- name: requeue_run
-- An operator's decision on a stuck run: a new fencing token fences out any driver that
-- still believes it owns the run.
-- A failed run's outcome is cleared: it runs again. The incarnation (so every key) stays.
-- So is a cancel asked for before the run failed or went in doubt (it never unwound):
-- the retry is the later decision (cancel again to stop it).
UPDATE runs
SET status = 'queued', fencing_token = fencing_token + 1, owner = NULL,
    lease_expires_at = NULL, starts_without_progress = 0, park_reason = NULL,
    wait_signal = NULL, outcome = NULL, error_type = NULL, error_message = NULL,
    finished_at = NULL, cancel_requested_at = NULL, cancel_reason = NULL,
    updated_at = %(now)s
WHERE run_id = %(run_id)s AND fencing_token = %(expected_token)s
RETURNING run_id, workflow, version, prompt_version, queue, input, input_digest,
          codec_version, status, generation, fencing_token, owner, lease_expires_at, starts,
          starts_without_progress, outcome, error_type, error_message, park_reason, wake_at,
          created_at, updated_at, finished_at, incarnation, cancel_requested_at, cancel_reason;

-- name: lock_queue
-- Serialises claims on one concurrency-limited queue, so two workers cannot both see a
-- free slot and both take it; unlimited queues never take this lock.
SELECT pg_advisory_xact_lock(hashtext('durably.queue.' || current_schema()),
                             hashtext(%(queue)s));

-- name: running_per_queue
-- A run of a provably dead owner (%(dead)s) holds no slot: a claim may take it over now.
SELECT queue, count(*) FROM runs
WHERE status = 'running' AND owner IS NOT NULL AND lease_expires_at > %(now)s
  AND queue = ANY(%(queues)s::text[]) AND NOT owner = ANY(%(dead)s::text[])
GROUP BY queue;

-- name: next_runnable
-- The oldest run this worker may take, filtered entirely here: its queue is open, its
-- workflow served (one (workflow, version) pair per registration, NULL for the one without
-- a version; a run without a version is served by any registration of its name: versions
-- route only when set), and
-- it is queued, running with no owner, an expired lease or an owner in %(dead)s (this
-- host's owners found dead in Python), or parked and due. The status term matches the
-- partial index runs_claimable, so finished runs are never read. SKIP LOCKED lets many
-- workers claim at once, each taking a different row, and LIMIT 1 locks only the row
-- this worker takes.
SELECT run_id, workflow, version, prompt_version, queue, input, input_digest, codec_version,
       status, generation, fencing_token, owner, lease_expires_at, starts,
       starts_without_progress, outcome, error_type, error_message, park_reason, wake_at,
       created_at, updated_at, finished_at, incarnation,
       cancel_requested_at, cancel_reason, records_at_last_start
FROM runs
WHERE status IN ('queued', 'running', 'parked')
  AND queue = ANY(%(queues)s::text[])
  AND EXISTS (SELECT 1 FROM unnest(%(workflows)s::text[], %(versions)s::text[]) AS s (w, v)
              WHERE s.w = runs.workflow AND (runs.version IS NULL OR s.v = runs.version))
  AND (status = 'queued'
       OR (status = 'running' AND (owner IS NULL OR lease_expires_at <= %(now)s
                                   OR owner = ANY(%(dead)s::text[])))
       OR (status = 'parked' AND wake_at IS NOT NULL AND wake_at <= %(now)s))
ORDER BY created_at, run_id
LIMIT 1
FOR UPDATE SKIP LOCKED;

-- name: same_host_owners
-- The owners holding live leases on this host (%(pattern)s from Owner.host_pattern): the
-- only ones whose liveness Python can judge (their pids are local). The IN term lets
-- the planner use runs_claimable, which holds no finished run.
SELECT DISTINCT owner FROM runs
WHERE status IN ('queued', 'running', 'parked') AND status = 'running'
  AND lease_expires_at > %(now)s AND owner LIKE %(pattern)s
LIMIT %(limit)s;

-- name: notify_work
-- Wakes workers blocked in wait_for_work; delivered at commit, so never before the change
-- it announces is visible.
SELECT pg_notify(%(channel)s, '');

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

-- name: put_blob
-- A payload by content hash: each distinct value is stored once.
INSERT INTO blobs (digest, data, size, created_at)
VALUES (%(digest)s, %(data)s, %(size)s, %(now)s)
ON CONFLICT (digest) DO NOTHING;

-- name: get_blobs
SELECT digest, data FROM blobs WHERE digest = ANY(%(digests)s::text[]);

-- name: lock_run_for_cancel
-- The run as a cancel finds it, locked to the cancel's commit, with whether its current
-- generation holds any record (a queued run that never ran ends at once).
SELECT run_id, workflow, version, prompt_version, queue, input, input_digest, codec_version,
       status, generation, fencing_token, owner, lease_expires_at, starts,
       starts_without_progress, outcome, error_type, error_message, park_reason, wake_at,
       created_at, updated_at, finished_at, incarnation, cancel_requested_at, cancel_reason,
       EXISTS (SELECT 1 FROM steps s
               WHERE s.run_id = runs.run_id AND s.generation = runs.generation)
FROM runs WHERE run_id = %(run_id)s
FOR NO KEY UPDATE OF runs;

-- name: request_cancel
-- The durable cancel flag (the first reason stays). A parked run wakes now, to unwind
-- (the caller NOTIFYs waiting workers in the same transaction).
UPDATE runs
SET cancel_requested_at = %(now)s, cancel_reason = %(reason)s::text,
    -- Due by the time it parked, if the canceller's clock says later (one running ahead
    -- of the workers' must not leave the run parked for the difference).
    wake_at = CASE WHEN status = 'parked' THEN least(%(now)s::double precision, updated_at)
                   ELSE wake_at END,
    updated_at = %(now)s
WHERE run_id = %(run_id)s AND cancel_requested_at IS NULL;

-- name: cancel_at_once
-- A run whose code will not run again without a person (queued and never ran; blocked,
-- quarantined, in doubt) ends cancelled in the cancel's transaction. The new token
-- fences out anything that still believes it holds the run.
UPDATE runs
SET status = 'cancelled', fencing_token = fencing_token + 1, owner = NULL,
    lease_expires_at = NULL, wake_at = NULL, error_type = %(error_type)s,
    error_message = %(error_message)s::text, park_reason = %(park_reason)s,
    finished_at = %(now)s, updated_at = %(now)s
WHERE run_id = %(run_id)s AND fencing_token = %(expected_token)s;

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
-- name: insert_spend
-- One ledger row per call that reported usage; the entry names the call, so a write
-- retried after an unknown outcome inserts nothing.
INSERT INTO spend (run_id, entry, generation, position, attempt, fencing_token, tokens,
                   input_tokens, output_tokens, cost_usd, recorded_at)
VALUES (%(run_id)s, %(entry)s, %(generation)s, %(position)s, %(attempt)s, %(token)s, %(tokens)s,
        %(input_tokens)s, %(output_tokens)s, %(cost_usd)s, %(now)s)
ON CONFLICT (run_id, entry) DO NOTHING;

-- name: get_spend
-- The run's spend (sums over its ledger rows, all generations) and its stored budget.
SELECT coalesce(sum(tokens), 0)::bigint, coalesce(sum(input_tokens), 0)::bigint,
       coalesce(sum(output_tokens), 0)::bigint, coalesce(sum(cost_usd), 0)::double precision,
       count(*),
       (SELECT count(*) FROM budgets b WHERE b.run_id = %(run_id)s),
       (SELECT b.tokens FROM budgets b WHERE b.run_id = %(run_id)s),
       (SELECT b.cost_usd FROM budgets b WHERE b.run_id = %(run_id)s)
FROM spend WHERE run_id = %(run_id)s;

-- name: set_budget
-- Fenced: written only while the token is current (no row changed: a stale token).
INSERT INTO budgets (run_id, tokens, cost_usd, set_at)
SELECT run_id, %(tokens)s::bigint, %(cost_usd)s::double precision, %(now)s FROM runs
WHERE run_id = %(run_id)s AND fencing_token = %(token)s
ON CONFLICT (run_id) DO UPDATE
SET tokens = excluded.tokens, cost_usd = excluded.cost_usd, set_at = excluded.set_at;

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
WITH woken AS (
    UPDATE runs SET wake_at = %(now)s, updated_at = %(now)s
    WHERE run_id = %(run_id)s AND status = 'parked'
    RETURNING 1
)
SELECT pg_notify(%(channel)s, '') FROM woken;
