-- 0008: budgets and the spend ledger (durably.usage, ctx.budget, BudgetExceeded).
-- New tables only, so it applies after any 0007.
-- A run's budget: at most one row, written by ctx.budget or the
-- workflow's budget= option (the latest call wins); NULL columns are no limit.
CREATE TABLE budgets (
    run_id   TEXT PRIMARY KEY REFERENCES runs (run_id) ON DELETE CASCADE,
    tokens   INTEGER,
    cost_usd REAL,
    set_at   REAL NOT NULL
) WITHOUT ROWID;

-- The spend ledger: one row per call of a step function that reported
-- usage (durably.usage), committed right after the call returned and before its result,
-- so a crash between the two still counts it. entry names the call (generation, position,
-- fencing token, attempt): a write retried after an unknown outcome is stored once, while
-- the same position called again by a later claim (after a crash) is a new row. A run's
-- spend is the sum over its rows, across generations.
CREATE TABLE spend (
    run_id        TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    entry         TEXT NOT NULL,
    generation    INTEGER NOT NULL,
    position      TEXT NOT NULL,
    attempt       INTEGER NOT NULL,
    fencing_token INTEGER NOT NULL,
    tokens        INTEGER NOT NULL,
    input_tokens  INTEGER,
    output_tokens INTEGER,
    cost_usd      REAL NOT NULL,
    recorded_at   REAL NOT NULL,
    PRIMARY KEY (run_id, entry)
) WITHOUT ROWID;
