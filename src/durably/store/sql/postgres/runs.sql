-- PostgreSQL queries of the store's runs: create, fork, read, list, count, requeue, cancel.
-- Parameters are psycopg named placeholders
-- (%(name)s). Parameters that can be NULL or that sit in a SELECT list carry an explicit
-- cast: PostgreSQL cannot infer the type of an untyped NULL there.

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

-- name: lock_fork_source
-- The run a fork copies, locked until the fork commits (FOR SHARE: a redaction's FOR
-- UPDATE waits for the fork, or the fork for it); read before the source's redaction
-- row, so a redaction committed since the fork read the source is seen and the fork
-- refused (a copy must never carry values just forgotten).
SELECT 1 FROM runs WHERE run_id = %(run_id)s FOR SHARE;
