-- The current durably journal schema for SQLite. Migrations in migrations/ must produce
-- exactly this (tests/unit/test_migrations.py checks it). Times are seconds since the
-- epoch (REAL); JSON is canonical text written by durably.codec.

CREATE TABLE durably_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE runs (
    run_id                  TEXT PRIMARY KEY,
    workflow                TEXT NOT NULL,
    version                 TEXT,
    prompt_version          TEXT,
    queue                   TEXT NOT NULL DEFAULT 'default',
    input                   TEXT NOT NULL,
    input_digest            TEXT NOT NULL,
    codec_version           INTEGER NOT NULL,
    status                  TEXT NOT NULL,
    park_reason             TEXT,
    wake_at                 REAL,
    outcome                 TEXT,
    error_type              TEXT,
    error_message           TEXT,
    generation              INTEGER NOT NULL DEFAULT 0,
    fencing_token           INTEGER NOT NULL DEFAULT 0,
    owner                   TEXT,
    lease_expires_at        REAL,
    starts                  INTEGER NOT NULL DEFAULT 0,
    starts_without_progress INTEGER NOT NULL DEFAULT 0,
    records_at_last_start   INTEGER NOT NULL DEFAULT 0,
    cancel_requested_at     REAL,
    cancel_reason           TEXT,
    created_at              REAL NOT NULL,
    updated_at              REAL NOT NULL,
    finished_at             REAL,
    -- Part of every idempotency key, drawn when the row is created (12 hex chars);
    -- NULL for runs created before migration 0002, whose keys have no incarnation.
    incarnation             TEXT,
    -- The cursor of the run's newest event (0: none yet). The next event takes the
    -- next number under this row's lock, so a run's events commit in cursor order.
    last_event              INTEGER NOT NULL DEFAULT 0,
    -- The signal names a parked run waits for, a JSON array (NULL when none): a signal of
    -- any of them wakes it at once. Cleared by a claim, with park_reason and wake_at.
    wait_signal             TEXT
);

CREATE INDEX runs_by_status ON runs (status, queue, created_at);
CREATE INDEX runs_by_created ON runs (created_at);
-- Prune finds finished runs by when they finished (migration 0011).
CREATE INDEX runs_by_finished ON runs (finished_at) WHERE finished_at IS NOT NULL;
-- The claim index: only runs a claim can take, oldest first (claims never read finished
-- runs).
CREATE INDEX runs_claimable ON runs (created_at, run_id)
    WHERE status IN ('queued', 'running', 'parked');

-- One row per position of a run generation: an effect intent, then its result.
CREATE TABLE steps (
    run_id         TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    generation     INTEGER NOT NULL,
    position       TEXT NOT NULL,
    kind           TEXT NOT NULL,
    name           TEXT NOT NULL,
    input_digest   TEXT NOT NULL,
    status         TEXT NOT NULL,
    output         TEXT,
    error_type     TEXT,
    error_message  TEXT,
    attempts       INTEGER NOT NULL DEFAULT 1,
    started_at     REAL NOT NULL,
    finished_at    REAL,
    usage_tokens   INTEGER,
    usage_cost_usd REAL,
    -- What the step was called with: a manifest of blob digests (durably.inputs).
    inputs         TEXT,
    PRIMARY KEY (run_id, generation, position)
) WITHOUT ROWID;

-- Signals sent to a run, numbered per run; a wait consumes the oldest of its name.
CREATE TABLE signals (
    run_id       TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    seq          INTEGER NOT NULL,
    name         TEXT NOT NULL,
    data         TEXT NOT NULL,
    sent_at      REAL NOT NULL,
    consumed_by  TEXT,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;

-- The run's append-only event stream. cursor numbers the run's events 1, 2, 3, ... in
-- commit order (taken from runs.last_event under the run's row lock: an identity column
-- commits out of order on PostgreSQL, and a reader going by it would miss events).
-- dedupe names the event's occurrence (e.g. an emit's position and index), so a write
-- repeated after an unknown commit outcome, or an emit replayed, is stored once.
CREATE TABLE events (
    run_id   TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE ON UPDATE CASCADE,
    cursor   INTEGER NOT NULL,
    kind     TEXT NOT NULL,
    position TEXT,
    data     TEXT NOT NULL,
    at       REAL NOT NULL,
    dedupe   TEXT NOT NULL,
    PRIMARY KEY (run_id, cursor)
) WITHOUT ROWID;

CREATE UNIQUE INDEX events_once ON events (run_id, dedupe);

-- Large payloads by content hash; histories keep the hash.
CREATE TABLE blobs (
    digest     TEXT PRIMARY KEY,
    data       BLOB NOT NULL,
    size       INTEGER NOT NULL,
    created_at REAL NOT NULL,
    -- Writes that cited the blob when it was already stored (migration 0011): the prune
    -- sweep deletes a blob only when this is unchanged since it looked for citations.
    touches    INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;

-- Live workers (owner string -> the queues it serves, as a JSON array); a row past
-- expires_at is a worker that died.
CREATE TABLE workers (
    owner      TEXT PRIMARY KEY,
    queues     TEXT NOT NULL,
    started_at REAL NOT NULL,
    beat_at    REAL NOT NULL,
    expires_at REAL NOT NULL
) WITHOUT ROWID;

-- A run's budget (migration 0008): at most one row, written by ctx.budget or the
-- workflow's budget= option (the latest call wins); NULL columns are no limit.
CREATE TABLE budgets (
    run_id   TEXT PRIMARY KEY REFERENCES runs (run_id) ON DELETE CASCADE,
    tokens   INTEGER,
    cost_usd REAL,
    set_at   REAL NOT NULL
) WITHOUT ROWID;

-- The spend ledger (migration 0008): one row per call of a step function that reported
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

-- Approval requests a run parked on (ctx.request_approval), one per position; the
-- decision is written once (approve, reject, or the expiry the run took).
CREATE TABLE approvals (
    run_id       TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    -- The request's position in its run (e.g. '3').
    request_id   TEXT NOT NULL,
    action       TEXT NOT NULL,
    -- Canonical JSON of the arguments the person reads.
    args         TEXT NOT NULL,
    -- sha256 hex of the canonical JSON of [action, args] (no codec prefix).
    digest       TEXT NOT NULL,
    requested_at REAL NOT NULL,
    expires_at   REAL,
    decided_at   REAL,
    -- NULL while pending; then 'approved', 'rejected' or 'expired'.
    outcome      TEXT,
    by_name      TEXT,
    note         TEXT,
    PRIMARY KEY (run_id, request_id)
) WITHOUT ROWID;

-- Pending requests, oldest first (durably approvals list).
CREATE INDEX approvals_pending ON approvals (requested_at) WHERE outcome IS NULL;

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
    records      INTEGER NOT NULL,
    finished_at  REAL NOT NULL,
    PRIMARY KEY (run_id, generation)
) WITHOUT ROWID;

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

-- The blobs a prune batch, a delete or a redaction stopped citing, written in the
-- transaction that removed the citations and dropped once the sweep looked at them. A
-- sweep that never ran (a crash after that commit) is made up by the next prune or
-- delete: no blob, nor a redacted value in one, is left behind for good.
CREATE TABLE sweep_pending (
    digest TEXT PRIMARY KEY
) WITHOUT ROWID;
