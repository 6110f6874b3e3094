-- Step inputs kept by content hash. A step row names what it was called with as a
-- small manifest of digests; the payloads go to the blobs table, each distinct value once,
-- a list of messages as a chain of per-message nodes (a turn adds one message).

ALTER TABLE steps ADD COLUMN inputs TEXT;
