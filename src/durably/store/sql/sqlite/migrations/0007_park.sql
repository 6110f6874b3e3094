-- 0007: parking. A parked run that waits for signals names them here, as a JSON array
-- (several when its gather branches wait at once; NULL when it waits for none), so a
-- signal of any of those names can wake it at once; a claim clears it with the park reason.

ALTER TABLE runs ADD COLUMN wait_signal TEXT;
