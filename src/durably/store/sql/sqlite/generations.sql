-- Queries of the store's generations (ctx.continue_as_new): the hand-over, and reads of
-- finished generations.
-- Parameters are named (:name).

-- name: lock_generation
-- The run's token, generation and input, under its lock to commit (PostgreSQL locks the
-- row; SQLite's BEGIN IMMEDIATE holds the one writer): nothing moves the token or the
-- generation before the hand-over commits.
SELECT fencing_token, generation, input, input_digest FROM runs WHERE run_id = :run_id;

-- name: generation_records
SELECT count(*) FROM steps WHERE run_id = :run_id AND generation = :generation;

-- name: put_generation
INSERT INTO generations (run_id, generation, input, input_digest, status, records,
                         finished_at)
VALUES (:run_id, :generation, :input, :input_digest, 'continued', :records,
        :now);

-- name: continue_run
-- The next generation: its input, positions from 0 (a new generation has no records, so
-- the quarantine's progress count starts again too). The lease and token stay: the
-- process that handed over drives the next generation at once.
UPDATE runs
SET generation = generation + 1, input = :input, input_digest = :input_digest,
    starts_without_progress = 0, records_at_last_start = 0, updated_at = :now
WHERE run_id = :run_id AND fencing_token = :token AND generation = :generation
RETURNING run_id, workflow, version, prompt_version, queue, input, input_digest,
          codec_version, status, generation, fencing_token, owner, lease_expires_at, starts,
          starts_without_progress, outcome, error_type, error_message, park_reason, wake_at,
          created_at, updated_at, finished_at, incarnation, cancel_requested_at, cancel_reason;

-- name: list_generations
-- The run's finished generations, oldest first.
SELECT generation, input, input_digest, status, records, finished_at FROM generations
WHERE run_id = :run_id ORDER BY generation;

-- name: origin_digest
-- The input digest of the run's generation 0 (once it has continued as new).
SELECT input_digest FROM generations WHERE run_id = :run_id AND generation = 0;
