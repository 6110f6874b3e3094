-- 0011: retention (durably prune, engine.delete_run).

-- What is left of a pruned or deleted run: enough to refuse a second run of its id
-- (RunPruned) or of its id with other input (RunConflict). Removed only by
-- `durably prune --tombstones-before`.
CREATE TABLE tombstones (
    run_id       TEXT PRIMARY KEY,
    workflow     TEXT NOT NULL,
    -- The run's input digest (generation 0's; 64 zeros once the run was redacted).
    input_digest TEXT NOT NULL,
    -- The status it finished with: completed, failed or cancelled.
    status       TEXT NOT NULL,
    incarnation  TEXT,
    finished_at  REAL,
    removed_at   REAL NOT NULL,
    -- 'pruned' (durably prune) or 'deleted' (durably runs delete).
    how          TEXT NOT NULL
) WITHOUT ROWID;

CREATE INDEX tombstones_by_removed ON tombstones (removed_at);

-- Runs whose values were replaced by a marker (durably runs delete --redact): when, by whom.
CREATE TABLE redactions (
    run_id      TEXT PRIMARY KEY REFERENCES runs (run_id) ON DELETE CASCADE,
    redacted_at REAL NOT NULL,
    redacted_by TEXT NOT NULL
) WITHOUT ROWID;

-- Leases of background jobs (one row per job, e.g. 'prune'): at most one process runs
-- each at a time.
CREATE TABLE maintenance (
    name       TEXT PRIMARY KEY,
    owner      TEXT NOT NULL,
    expires_at REAL NOT NULL
) WITHOUT ROWID;

-- Counts the writes that cited a blob already stored (put_blob's ON CONFLICT): the prune
-- sweep deletes a blob only when its count is the one it read before looking for
-- citations, so a blob cited meanwhile is kept.
ALTER TABLE blobs ADD COLUMN touches INTEGER NOT NULL DEFAULT 0;

-- Prune finds finished runs by when they finished.
CREATE INDEX runs_by_finished ON runs (finished_at) WHERE finished_at IS NOT NULL;
