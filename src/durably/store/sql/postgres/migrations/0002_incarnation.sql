-- 0002: every run row gets an incarnation, 12 lowercase hex characters drawn when the row
-- is created and part of every idempotency key of the run ({run_id}:{incarnation}:{position}),
-- so a run id reused in another journal or re-created after a wipe never repeats a key.
-- Rows from before this migration keep NULL: their keys stay {run_id}:{position}, the
-- keys their effects (maybe in doubt) were first sent with.

ALTER TABLE runs ADD COLUMN incarnation TEXT;
