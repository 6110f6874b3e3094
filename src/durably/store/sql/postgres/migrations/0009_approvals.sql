-- 0009: approvals. One row per ctx.request_approval a run parked on, written with the park
-- (in its transaction); the decision (approve, reject, or the expiry the run took) is
-- written once, under the run's row lock.

CREATE TABLE approvals (
    run_id       TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    -- The request's position in its run (e.g. '3').
    request_id   TEXT NOT NULL,
    action       TEXT NOT NULL,
    -- Canonical JSON of the arguments the person reads.
    args         TEXT NOT NULL,
    -- sha256 hex of the canonical JSON of [action, args] (no codec prefix).
    digest       TEXT NOT NULL,
    requested_at DOUBLE PRECISION NOT NULL,
    expires_at   DOUBLE PRECISION,
    decided_at   DOUBLE PRECISION,
    -- NULL while pending; then 'approved', 'rejected' or 'expired'.
    outcome      TEXT,
    by_name      TEXT,
    note         TEXT,
    PRIMARY KEY (run_id, request_id)
);

-- Pending requests, oldest first (durably approvals list).
CREATE INDEX approvals_pending ON approvals (requested_at) WHERE outcome IS NULL;
