-- SQLite queries of retention: prune, tombstones, delete and redact one run, the blob
-- sweep, maintenance leases. Every write transaction holds the database's one writer
-- lock from BEGIN IMMEDIATE, so the lock_* queries are plain reads here.

-- name: prunable
-- One page of finished runs that finished before :before, oldest first, keyset-paged
-- after (:after_at, :after_id) (dry runs page; a real prune deletes what it read).
SELECT run_id, finished_at FROM runs
WHERE finished_at IS NOT NULL AND finished_at < :before
  AND status IN (SELECT value FROM json_each(:statuses))
  AND (:after_at IS NULL OR (finished_at, run_id) > (:after_at, :after_id))
ORDER BY finished_at, run_id
LIMIT :limit;

-- name: lock_removable
-- The runs among :run_ids still finished (with one of :statuses, before :before when it is
-- not NULL), read again inside the deleting transaction: a run retried, forked over or
-- re-opened since the page was read is left alone.
-- The tombstone keeps generation 0's input digest (a run that continued as new holds
-- its current generation's): engine.run compares a call's input with generation 0's.
SELECT run_id, workflow,
       coalesce((SELECT g.input_digest FROM generations g
                 WHERE g.run_id = runs.run_id AND g.generation = 0), input_digest),
       status, incarnation, finished_at FROM runs
WHERE run_id IN (SELECT value FROM json_each(:run_ids))
  AND status IN (SELECT value FROM json_each(:statuses))
  AND finished_at IS NOT NULL
  AND (:before IS NULL OR finished_at < :before);

-- name: run_citations
-- What the records of :run_ids (every generation) may cite in the blob table.
SELECT inputs, output FROM steps
WHERE run_id IN (SELECT value FROM json_each(:run_ids))
  AND (inputs IS NOT NULL OR output LIKE '{"$blob":%');

-- name: insert_tombstone
INSERT INTO tombstones (run_id, workflow, input_digest, status, incarnation, finished_at,
                        removed_at, how)
VALUES (:run_id, :workflow, :input_digest, :status, :incarnation, :finished_at, :now, :how)
ON CONFLICT (run_id) DO NOTHING;

-- name: delete_runs
-- Every generation's records, events, signals, approvals, budget and spend go with the
-- row (ON DELETE CASCADE).
DELETE FROM runs WHERE run_id IN (SELECT value FROM json_each(:run_ids));

-- name: get_tombstone
SELECT run_id, workflow, input_digest, status, incarnation, finished_at, removed_at, how
FROM tombstones WHERE run_id = :run_id;

-- name: list_tombstones
-- Newest first, keyset-paged after (:after_at, :after_id).
SELECT run_id, workflow, input_digest, status, incarnation, finished_at, removed_at, how
FROM tombstones
WHERE :after_at IS NULL OR (removed_at, run_id) < (:after_at, :after_id)
ORDER BY removed_at DESC, run_id DESC
LIMIT :limit;

-- name: count_tombstones
-- How many tombstones a delete_tombstones of the same cut would remove (a dry run).
SELECT count(*) FROM tombstones WHERE removed_at < :before;

-- name: delete_tombstones
-- One batch of tombstones removed before :before.
DELETE FROM tombstones WHERE run_id IN (
    SELECT run_id FROM tombstones WHERE removed_at < :before ORDER BY removed_at LIMIT :limit
);

-- name: blob_state
-- The candidates' touch counts and sizes, and the text of the small ones (conversation
-- nodes, whose citations the sweep follows).
SELECT digest, touches, size, CASE WHEN size <= :small THEN data END FROM blobs
WHERE digest IN (SELECT value FROM json_each(:digests));

-- name: lock_blobs
SELECT digest, touches FROM blobs WHERE digest IN (SELECT value FROM json_each(:digests));

-- name: delete_blob
-- Only when nothing cited it since its count was read (put_blob counts every citation
-- of a stored blob under the row's lock).
DELETE FROM blobs WHERE digest = :digest AND touches = :touches RETURNING size;

-- name: citing_page
-- One page of records that may cite blobs, over the whole journal, keyset-paged.
SELECT run_id, generation, position, inputs, output FROM steps
WHERE (run_id, generation, position) > (:after_run, :after_gen, :after_pos)
  AND (inputs IS NOT NULL OR output LIKE '{"$blob":%')
ORDER BY run_id, generation, position
LIMIT :limit;

-- name: lock_run_for_delete
-- The tombstone keeps generation 0's input digest (a run that continued as new holds
-- its current generation's): engine.run compares a call's input with generation 0's.
SELECT run_id, workflow,
       coalesce((SELECT g.input_digest FROM generations g
                 WHERE g.run_id = runs.run_id AND g.generation = 0), input_digest),
       status, incarnation, finished_at FROM runs
WHERE run_id = :run_id;

-- name: get_redaction
SELECT run_id, redacted_at, redacted_by FROM redactions WHERE run_id = :run_id;

-- name: insert_redaction
INSERT INTO redactions (run_id, redacted_at, redacted_by) VALUES (:run_id, :now, :by)
ON CONFLICT (run_id) DO NOTHING;

-- name: redact_run_row
UPDATE runs
SET input = :marker_json, input_digest = :marker_digest,
    outcome = CASE WHEN outcome IS NULL THEN NULL ELSE :marker_json END,
    error_message = CASE WHEN error_message IS NULL THEN NULL ELSE :marker END,
    park_reason = CASE WHEN park_reason IS NULL THEN NULL ELSE :marker END,
    cancel_reason = CASE WHEN cancel_reason IS NULL THEN NULL ELSE :marker END,
    updated_at = :now
WHERE run_id = :run_id;

-- name: redactable_steps
SELECT generation, position, inputs, name FROM steps WHERE run_id = :run_id;

-- name: redact_step
UPDATE steps
SET name = :name, input_digest = :marker_digest, inputs = :inputs,
    output = CASE WHEN output IS NULL THEN NULL ELSE :marker_json END,
    error_message = CASE WHEN error_message IS NULL THEN NULL ELSE :marker END
WHERE run_id = :run_id AND generation = :generation AND position = :position;

-- name: redact_events
-- Event data is an object on the way out (store/stream.py checks it).
UPDATE events SET data = :marker_event WHERE run_id = :run_id;

-- name: redact_signals
UPDATE signals SET data = :marker_json WHERE run_id = :run_id;

-- name: redact_approvals
UPDATE approvals
SET action = :marker, args = :marker_json, digest = :marker_digest,
    by_name = CASE WHEN by_name IS NULL THEN NULL ELSE :marker END,
    note = CASE WHEN note IS NULL THEN NULL ELSE :marker END
WHERE run_id = :run_id;

-- name: take_maintenance
-- The job's lease: taken when free, expired, or already ours; returns a row when held.
INSERT INTO maintenance (name, owner, expires_at) VALUES (:name, :owner, :expires_at)
ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at
WHERE maintenance.owner = excluded.owner OR maintenance.expires_at < :now
RETURNING owner;

-- name: touch_blobs
-- A fork's copied records cite these blobs without storing them: count a touch on each
-- (under the row's lock, as put_blob does), so a sweep running meanwhile keeps them.
-- Returns the digests still stored.
UPDATE blobs SET touches = touches + 1 WHERE digest IN (SELECT value FROM json_each(:digests))
RETURNING digest;

-- name: redact_generations
-- The inputs of a run's finished generations (ctx.continue_as_new) are values too.
UPDATE generations SET input = :marker_json, input_digest = :marker_digest
WHERE run_id = :run_id;

-- name: add_sweep_pending
INSERT INTO sweep_pending (digest) VALUES (:digest) ON CONFLICT (digest) DO NOTHING;

-- name: sweep_pending
-- The blobs a removal stopped citing whose sweep has not run yet, keyset-paged.
SELECT digest FROM sweep_pending WHERE digest > :after ORDER BY digest LIMIT :limit;

-- name: drop_sweep_pending
DELETE FROM sweep_pending WHERE digest IN (SELECT value FROM json_each(:digests));
