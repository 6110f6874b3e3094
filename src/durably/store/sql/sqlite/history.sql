-- SQLite queries of the store's history: step records and blobs, append, finish, park.
-- Parameters are named (:name).

-- name: park_run
-- The run gives up its process to wait (fenced). It wakes at :wake_at, or at once when a
-- cancel was asked for, a signal it waits for was sent, or an approval it waits on was
-- decided before this park (the wake-up would otherwise be lost: whoever sent it saw the
-- run running, not parked). :wait_signal and :wait_approval are JSON arrays (names,
-- request ids), or NULL: a run whose gather branches parked waits on several at once.
UPDATE runs
SET status = 'parked', owner = NULL, lease_expires_at = NULL, park_reason = :park_reason,
    wait_signal = :wait_signal,
    wake_at = CASE
        WHEN cancel_requested_at IS NOT NULL
          OR (:wait_signal IS NOT NULL
              AND EXISTS (SELECT 1 FROM signals s
                          WHERE s.run_id = runs.run_id
                            AND s.name IN (SELECT value FROM json_each(:wait_signal))
                            AND s.consumed_by IS NULL))
          OR (:wait_approval IS NOT NULL
              AND EXISTS (SELECT 1 FROM approvals a
                          WHERE a.run_id = runs.run_id
                            AND a.request_id IN (SELECT value FROM json_each(:wait_approval))
                            AND a.outcome IS NOT NULL))
        THEN :now
        ELSE :wake_at
    END,
    updated_at = :now
WHERE run_id = :run_id AND fencing_token = :token
RETURNING wake_at;

-- name: load_history
SELECT position, kind, name, input_digest, status, output, error_type, error_message,
       attempts, started_at, finished_at, usage_tokens, usage_cost_usd, inputs
FROM steps WHERE run_id = :run_id AND generation = :generation;

-- name: append_record
-- Fenced upsert: writes only while the token is current; a result may replace an
-- intent or a wait in progress (``waiting``), never another result.
INSERT INTO steps (run_id, generation, position, kind, name, input_digest, status, output,
                   error_type, error_message, attempts, started_at, finished_at,
                   usage_tokens, usage_cost_usd, inputs)
SELECT :run_id, generation, :position, :kind, :name, :input_digest, :status, :output,
       :error_type, :error_message, :attempts, :started_at, :finished_at,
       :usage_tokens, :usage_cost_usd, :inputs
FROM runs WHERE run_id = :run_id AND fencing_token = :token
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
-- the flag at no extra cost (Store.append returns it). No row: the write was refused.
RETURNING (SELECT cancel_requested_at IS NOT NULL FROM runs WHERE run_id = :run_id);

-- name: load_record
-- One position of the run's current generation (to explain a refused append).
SELECT s.position, s.kind, s.name, s.input_digest, s.status, s.output, s.error_type,
       s.error_message, s.attempts, s.started_at, s.finished_at, s.usage_tokens,
       s.usage_cost_usd, s.inputs
FROM steps s JOIN runs r ON r.run_id = s.run_id AND r.generation = s.generation
WHERE s.run_id = :run_id AND s.position = :position;

-- name: check_token
-- The token of a run, and whether a cancel was asked for (to explain a refused append).
SELECT fencing_token, cancel_requested_at IS NOT NULL FROM runs WHERE run_id = :run_id;

-- name: lock_token
-- The token of a run, and whether a cancel was asked for. SQLite's lock is the caller's
-- BEGIN IMMEDIATE (the one writer), taken before this read: nothing moves the token until
-- commit. (PostgreSQL's lock_token locks the row itself.)
SELECT fencing_token, cancel_requested_at IS NOT NULL FROM runs WHERE run_id = :run_id;

-- name: finish_run
UPDATE runs
SET status = :status, outcome = :outcome, error_type = :error_type,
    error_message = :error_message, owner = NULL, lease_expires_at = NULL,
    park_reason = :park_reason, finished_at = :finished_at, updated_at = :now
WHERE run_id = :run_id AND fencing_token = :token;

-- name: put_blob
-- A payload by content hash: each distinct value is stored once. Citing a blob already
-- stored updates its row (touches + 1): the update takes the row's lock, which the prune
-- sweep's delete takes too, so the two serialise, and the sweep deletes only a blob whose
-- count did not change since it looked for citations (see store/retention.py).
INSERT INTO blobs (digest, data, size, created_at)
VALUES (:digest, :data, :size, :now)
ON CONFLICT (digest) DO UPDATE SET touches = blobs.touches + 1;

-- name: get_blobs
SELECT digest, data FROM blobs WHERE digest IN (SELECT value FROM json_each(:digests));
