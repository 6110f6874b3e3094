-- 0012: the blobs waiting for the prune sweep.

-- The blobs a prune batch, a delete or a redaction stopped citing, written in the
-- transaction that removed the citations and dropped once the sweep looked at them. A
-- sweep that never ran (a crash after that commit) is made up by the next prune or
-- delete: no blob, nor a redacted value in one, is left behind for good.
CREATE TABLE sweep_pending (
    digest TEXT PRIMARY KEY
);
