-- PostgreSQL queries of retention: prune, tombstones, delete and redact one run, the blob
-- sweep, maintenance leases. The lock_* queries take row locks (FOR UPDATE) held to
-- commit; the other statements of a transaction each read a fresh snapshot (READ
-- COMMITTED), so what they read after a lock was taken includes every commit before it.

-- name: prunable
-- One page of finished runs that finished before before, oldest first, keyset-paged
-- after (after_at, after_id) (dry runs page; a real prune deletes what it read).
SELECT run_id, finished_at FROM runs
WHERE finished_at IS NOT NULL AND finished_at < %(before)s
  AND status = ANY(%(statuses)s::text[])
  AND (%(after_at)s::double precision IS NULL
       OR (finished_at, run_id) > (%(after_at)s::double precision, %(after_id)s::text))
ORDER BY finished_at, run_id
LIMIT %(limit)s;

-- name: lock_removable
-- The runs among run_ids still finished (with one of statuses, before before when it is
-- not NULL), read again inside the deleting transaction: a run retried, forked over or
-- re-opened since the page was read is left alone.
-- The tombstone keeps generation 0's input digest (a run that continued as new holds
-- its current generation's): engine.run compares a call's input with generation 0's.
SELECT run_id, workflow,
       coalesce((SELECT g.input_digest FROM generations g
                 WHERE g.run_id = runs.run_id AND g.generation = 0), input_digest),
       status, incarnation, finished_at FROM runs
WHERE run_id = ANY(%(run_ids)s::text[])
  AND status = ANY(%(statuses)s::text[])
  AND finished_at IS NOT NULL
  AND (%(before)s::double precision IS NULL OR finished_at < %(before)s::double precision)
ORDER BY run_id  -- one lock order for every prune: a plan's own order could cross another's
FOR UPDATE;

-- name: run_citations
-- What the records of run_ids (every generation) may cite in the blob table.
SELECT inputs, output FROM steps
WHERE run_id = ANY(%(run_ids)s::text[])
  AND (inputs IS NOT NULL OR output LIKE '{"$blob":%%');

-- name: insert_tombstone
INSERT INTO tombstones (run_id, workflow, input_digest, status, incarnation, finished_at,
                        removed_at, how)
VALUES (%(run_id)s, %(workflow)s, %(input_digest)s, %(status)s, %(incarnation)s, %(finished_at)s, %(now)s, %(how)s)
ON CONFLICT (run_id) DO NOTHING;

-- name: delete_runs
-- Every generation's records, events, signals, approvals, budget and spend go with the
-- row (ON DELETE CASCADE).
DELETE FROM runs WHERE run_id = ANY(%(run_ids)s::text[]);

-- name: get_tombstone
SELECT run_id, workflow, input_digest, status, incarnation, finished_at, removed_at, how
FROM tombstones WHERE run_id = %(run_id)s;

-- name: list_tombstones
-- Newest first, keyset-paged after (after_at, after_id).
SELECT run_id, workflow, input_digest, status, incarnation, finished_at, removed_at, how
FROM tombstones
WHERE %(after_at)s::double precision IS NULL
   OR (removed_at, run_id) < (%(after_at)s::double precision, %(after_id)s::text)
ORDER BY removed_at DESC, run_id DESC
LIMIT %(limit)s;

-- name: count_tombstones
-- How many tombstones a delete_tombstones of the same cut would remove (a dry run).
SELECT count(*) FROM tombstones WHERE removed_at < %(before)s;

-- name: delete_tombstones
-- One batch of tombstones removed before before.
DELETE FROM tombstones WHERE run_id IN (
    SELECT run_id FROM tombstones WHERE removed_at < %(before)s ORDER BY removed_at LIMIT %(limit)s
);

-- name: blob_state
-- The candidates' touch counts and sizes, and the text of the small ones (conversation
-- nodes, whose citations the sweep follows).
SELECT digest, touches, size, CASE WHEN size <= %(small)s THEN data END FROM blobs
WHERE digest = ANY(%(digests)s::text[]);

-- name: lock_blobs
SELECT digest, touches FROM blobs WHERE digest = ANY(%(digests)s::text[])
ORDER BY digest FOR UPDATE;

-- name: delete_blob
-- Only when nothing cited it since its count was read (put_blob counts every citation
-- of a stored blob under the row's lock).
DELETE FROM blobs WHERE digest = %(digest)s AND touches = %(touches)s RETURNING size;

-- name: citing_page
-- One page of records that may cite blobs, over the whole journal, keyset-paged.
SELECT run_id, generation, position, inputs, output FROM steps
WHERE (run_id, generation, position) > (%(after_run)s, %(after_gen)s, %(after_pos)s)
  AND (inputs IS NOT NULL OR output LIKE '{"$blob":%%')
ORDER BY run_id, generation, position
LIMIT %(limit)s;

-- name: lock_run_for_delete
-- The tombstone keeps generation 0's input digest (a run that continued as new holds
-- its current generation's): engine.run compares a call's input with generation 0's.
SELECT run_id, workflow,
       coalesce((SELECT g.input_digest FROM generations g
                 WHERE g.run_id = runs.run_id AND g.generation = 0), input_digest),
       status, incarnation, finished_at FROM runs
WHERE run_id = %(run_id)s
FOR UPDATE;

-- name: get_redaction
SELECT run_id, redacted_at, redacted_by FROM redactions WHERE run_id = %(run_id)s;

-- name: insert_redaction
INSERT INTO redactions (run_id, redacted_at, redacted_by) VALUES (%(run_id)s, %(now)s, %(by)s)
ON CONFLICT (run_id) DO NOTHING;

-- name: redact_run_row
UPDATE runs
SET input = %(marker_json)s, input_digest = %(marker_digest)s,
    outcome = CASE WHEN outcome IS NULL THEN NULL ELSE %(marker_json)s END,
    error_message = CASE WHEN error_message IS NULL THEN NULL ELSE %(marker)s END,
    park_reason = CASE WHEN park_reason IS NULL THEN NULL ELSE %(marker)s END,
    cancel_reason = CASE WHEN cancel_reason IS NULL THEN NULL ELSE %(marker)s END,
    updated_at = %(now)s
WHERE run_id = %(run_id)s;

-- name: redactable_steps
SELECT generation, position, inputs, name FROM steps WHERE run_id = %(run_id)s;

-- name: redact_step
UPDATE steps
SET name = %(name)s, input_digest = %(marker_digest)s, inputs = %(inputs)s,
    output = CASE WHEN output IS NULL THEN NULL ELSE %(marker_json)s END,
    error_message = CASE WHEN error_message IS NULL THEN NULL ELSE %(marker)s END
WHERE run_id = %(run_id)s AND generation = %(generation)s AND position = %(position)s;

-- name: redact_events
-- Event data is an object on the way out (store/stream.py checks it).
UPDATE events SET data = %(marker_event)s WHERE run_id = %(run_id)s;

-- name: redact_signals
UPDATE signals SET data = %(marker_json)s WHERE run_id = %(run_id)s;

-- name: redact_approvals
UPDATE approvals
SET action = %(marker)s, args = %(marker_json)s, digest = %(marker_digest)s,
    by_name = CASE WHEN by_name IS NULL THEN NULL ELSE %(marker)s END,
    note = CASE WHEN note IS NULL THEN NULL ELSE %(marker)s END
WHERE run_id = %(run_id)s;

-- name: take_maintenance
-- The job's lease: taken when free, expired, or already ours; returns a row when held.
INSERT INTO maintenance (name, owner, expires_at) VALUES (%(name)s, %(owner)s, %(expires_at)s)
ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at
WHERE maintenance.owner = excluded.owner OR maintenance.expires_at < %(now)s
RETURNING owner;

-- name: touch_blobs
-- A fork's copied records cite these blobs without storing them: count a touch on each
-- (under the row's lock, as put_blob does), so a sweep running meanwhile keeps them.
-- Returns the digests still stored. The rows are locked in digest order first (an
-- UPDATE ... = ANY locks them in the order its plan meets them, a sequential scan's
-- storage order), the order put_blob and the sweep lock in: no deadlock with either.
UPDATE blobs SET touches = touches + 1
WHERE digest IN (
    SELECT digest FROM blobs WHERE digest = ANY(%(digests)s::text[]) ORDER BY digest FOR UPDATE
)
RETURNING digest;

-- name: redact_generations
-- The inputs of a run's finished generations (ctx.continue_as_new) are values too.
UPDATE generations SET input = %(marker_json)s, input_digest = %(marker_digest)s
WHERE run_id = %(run_id)s;

-- name: add_sweep_pending
INSERT INTO sweep_pending (digest) VALUES (%(digest)s) ON CONFLICT (digest) DO NOTHING;

-- name: sweep_pending
-- The blobs a removal stopped citing whose sweep has not run yet, keyset-paged.
SELECT digest FROM sweep_pending WHERE digest > %(after)s ORDER BY digest LIMIT %(limit)s;

-- name: drop_sweep_pending
-- Locked in digest order first (a DELETE ... = ANY locks rows in the order its plan meets
-- them, a sequential scan's storage order): two sweeps dropping overlapping digests
-- cannot cross.
DELETE FROM sweep_pending
WHERE digest IN (
    SELECT digest FROM sweep_pending WHERE digest = ANY(%(digests)s::text[])
    ORDER BY digest FOR UPDATE
);
