-- 0010: generations (ctx.continue_as_new).

-- Each finished generation of a run (ctx.continue_as_new): its input, its size and when
-- it ended, written in the hand-over's transaction (one row per generation, never
-- updated). The run row holds the current generation's input; generation 0's row keeps
-- the digest engine.run(wf, args, run_id=) compares a new call's input with.
CREATE TABLE generations (
    run_id       TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    generation   INTEGER NOT NULL,
    -- The generation's input (canonical JSON {args, kwargs}) and its sha256.
    input        TEXT NOT NULL,
    input_digest TEXT NOT NULL,
    -- 'continued' (the only way a generation ends while its run goes on).
    status       TEXT NOT NULL,
    records      BIGINT NOT NULL,
    finished_at  DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (run_id, generation)
);
