-- 0007: parking. A parked run that waits for a signal names it here (NULL otherwise), so
-- a signal of that name can wake it at once; a claim clears it with the park reason.

ALTER TABLE runs ADD COLUMN wait_signal TEXT;
