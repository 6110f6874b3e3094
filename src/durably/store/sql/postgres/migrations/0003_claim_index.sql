-- 0003: the claim index. Only runs a claim can take (queued, running, parked) are in it,
-- oldest first, so a claim walks the runnable candidates in order and never reads the
-- finished runs, however many there are.

CREATE INDEX runs_claimable ON runs (created_at, run_id)
    WHERE status IN ('queued', 'running', 'parked');
