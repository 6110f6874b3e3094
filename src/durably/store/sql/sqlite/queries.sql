-- Named queries of the SQLite store. Parameters are named (:name).

-- name: insert_run
INSERT INTO runs (run_id, workflow, version, prompt_version, queue, input, input_digest,
                  codec_version, incarnation, status, created_at, updated_at)
VALUES (:run_id, :workflow, :version, :prompt_version, :queue, :input, :input_digest,
        :codec_version, :incarnation, 'queued', :now, :now)
ON CONFLICT (run_id) DO NOTHING;

-- name: get_run
SELECT run_id, workflow, version, prompt_version, queue, input, input_digest, codec_version,
       status, generation, fencing_token, owner, lease_expires_at, starts,
       starts_without_progress, outcome, error_type, error_message, park_reason, wake_at,
       created_at, updated_at, finished_at, incarnation, cancel_requested_at, cancel_reason
FROM runs WHERE run_id = :run_id;

-- name: list_runs
-- One page of runs, newest first (created_at DESC, then run_id), keyset-paged: :after_at
-- and :after_id are the last run of the page before (NULL for the first page), so a run
-- created while pages are read never shifts the ones after it. The range on created_at
-- lets runs_by_created serve the order (only runs created at the same instant are
-- sorted); :statuses is a JSON array of statuses or NULL; :search a substring of run_id
-- (instr: case-sensitive, no wildcards).
SELECT run_id, workflow, version, prompt_version, queue, input, input_digest, codec_version,
       status, generation, fencing_token, owner, lease_expires_at, starts,
       starts_without_progress, outcome, error_type, error_message, park_reason, wake_at,
       created_at, updated_at, finished_at, incarnation, cancel_requested_at, cancel_reason
FROM runs
WHERE created_at <= coalesce(:after_at, 9e999)
  AND (:after_at IS NULL OR created_at < :after_at OR run_id > :after_id)
  AND (:statuses IS NULL OR status IN (SELECT value FROM json_each(:statuses)))
  AND (:workflow IS NULL OR workflow = :workflow)
  AND (:version IS NULL OR version = :version)
  AND (:queue IS NULL OR queue = :queue)
  AND (:search IS NULL OR instr(run_id, :search) > 0)
  AND (:since IS NULL OR created_at >= :since)
ORDER BY created_at DESC, run_id
LIMIT :limit;

-- name: runs_by_version
-- Runs not yet finished, counted per workflow, version and status: what each version's
-- workers still have to drive before they can be stopped.
SELECT workflow, version, status, count(*) FROM runs
WHERE status NOT IN ('completed', 'failed', 'cancelled', 'continued')
GROUP BY workflow, version, status
ORDER BY workflow, version, status;  -- NULL (no version) sorts first, as in postgres

-- name: count_runs
-- How many runs of each status (the count line of `durably runs list`), with the filters
-- of list_runs other than the status and the cursor.
SELECT status, count(*) FROM runs
WHERE (:workflow IS NULL OR workflow = :workflow) AND (:since IS NULL OR created_at >= :since)
  AND (:version IS NULL OR version = :version)
  AND (:queue IS NULL OR queue = :queue)
  AND (:search IS NULL OR instr(run_id, :search) > 0)
GROUP BY status;

-- name: count_records
SELECT count(*) FROM steps
WHERE run_id = :run_id AND generation = :generation AND status <> 'intent';

-- name: claim_run
UPDATE runs
SET fencing_token = fencing_token + 1, owner = :owner, lease_expires_at = :lease_expires_at,
    status = 'running', park_reason = NULL, wake_at = NULL, wait_signal = NULL,
    starts = starts + 1,
    starts_without_progress = :starts_without_progress,
    records_at_last_start = :records, updated_at = :now
WHERE run_id = :run_id AND fencing_token = :expected_token;

-- name: quarantine_run
UPDATE runs
SET status = 'quarantined', owner = NULL, lease_expires_at = NULL, updated_at = :now
WHERE run_id = :run_id AND fencing_token = :expected_token;

-- name: renew_lease
UPDATE runs SET lease_expires_at = :lease_expires_at
WHERE run_id = :run_id AND fencing_token = :token AND owner IS NOT NULL;

-- name: release_run
UPDATE runs
SET owner = NULL, lease_expires_at = NULL, status = coalesce(:status, status),
    park_reason = :park_reason, wake_at = :wake_at, wait_signal = NULL, updated_at = :now
WHERE run_id = :run_id AND fencing_token = :token;

-- name: park_run
-- The run gives up its process to wait (fenced). It wakes at :wake_at, or at once when a
-- cancel was asked for, a signal it waits for was sent, or an approval it waits on was
-- decided before this park (the wake-up would otherwise be lost: whoever sent it saw the
-- run running, not parked). :wait_signal and :wait_approval are JSON arrays (names,
-- request ids), or NULL: a run whose gather branches parked waits on several at once.
UPDATE runs
SET status = 'parked', owner = NULL, lease_expires_at = NULL, park_reason = :park_reason,
    wait_signal = :wait_signal,
    wake_at = CASE
        WHEN cancel_requested_at IS NOT NULL
          OR (:wait_signal IS NOT NULL
              AND EXISTS (SELECT 1 FROM signals s
                          WHERE s.run_id = runs.run_id
                            AND s.name IN (SELECT value FROM json_each(:wait_signal))
                            AND s.consumed_by IS NULL))
          OR (:wait_approval IS NOT NULL
              AND EXISTS (SELECT 1 FROM approvals a
                          WHERE a.run_id = runs.run_id
                            AND a.request_id IN (SELECT value FROM json_each(:wait_approval))
                            AND a.outcome IS NOT NULL))
        THEN :now
        ELSE :wake_at
    END,
    updated_at = :now
WHERE run_id = :run_id AND fencing_token = :token
RETURNING wake_at;

-- name: load_history
SELECT position, kind, name, input_digest, status, output, error_type, error_message,
       attempts, started_at, finished_at, usage_tokens, usage_cost_usd, inputs
FROM steps WHERE run_id = :run_id AND generation = :generation;

-- name: append_record
-- Fenced upsert: writes only while the token is current; a result may replace an
-- intent or a wait in progress (``waiting``), never another result.
INSERT INTO steps (run_id, generation, position, kind, name, input_digest, status, output,
                   error_type, error_message, attempts, started_at, finished_at,
                   usage_tokens, usage_cost_usd, inputs)
SELECT :run_id, generation, :position, :kind, :name, :input_digest, :status, :output,
       :error_type, :error_message, :attempts, :started_at, :finished_at,
       :usage_tokens, :usage_cost_usd, :inputs
FROM runs WHERE run_id = :run_id AND fencing_token = :token
ON CONFLICT (run_id, generation, position) DO UPDATE
-- Kind, name and digest change only over a wait in progress (a result over its
-- intent has the same), and so does the start (a result keeps its intent's): a
-- cancel delivered at a timer records its halt marker there, stored as written.
SET kind = excluded.kind, name = excluded.name, input_digest = excluded.input_digest,
    started_at = CASE WHEN steps.status = 'waiting' THEN excluded.started_at
                      ELSE steps.started_at END,
    status = excluded.status, output = excluded.output, error_type = excluded.error_type,
    error_message = excluded.error_message, attempts = excluded.attempts,
    finished_at = excluded.finished_at, usage_tokens = excluded.usage_tokens,
    usage_cost_usd = excluded.usage_cost_usd,
    -- A result keeps the inputs its intent recorded unless it brings its own.
    inputs = coalesce(excluded.inputs, steps.inputs)
WHERE steps.status = 'intent'
   -- A wait in progress gives way to its result, or to itself (the same wake time: a
   -- write retried after an unknown outcome); never to an intent or another wake time.
   OR (steps.status = 'waiting'
       AND (excluded.status IN ('ok', 'failed')
            OR (excluded.status = 'waiting' AND excluded.output = steps.output)))
-- Whether a cancel was asked for, read in the same statement: every step boundary checks
-- the flag at no extra cost (Store.append returns it). No row: the write was refused.
RETURNING (SELECT cancel_requested_at FROM runs WHERE run_id = :run_id);

-- name: load_record
-- One position of the run's current generation (to explain a refused append).
SELECT s.position, s.kind, s.name, s.input_digest, s.status, s.output, s.error_type,
       s.error_message, s.attempts, s.started_at, s.finished_at, s.usage_tokens,
       s.usage_cost_usd, s.inputs
FROM steps s JOIN runs r ON r.run_id = s.run_id AND r.generation = s.generation
WHERE s.run_id = :run_id AND s.position = :position;

-- name: check_token
SELECT fencing_token, cancel_requested_at FROM runs WHERE run_id = :run_id;

-- name: lock_token
-- The token of a run, and whether a cancel was asked for. SQLite's lock is the caller's
-- BEGIN IMMEDIATE (the one writer), taken before this read: nothing moves the token until
-- commit. (PostgreSQL's lock_token locks the row itself.)
SELECT fencing_token, cancel_requested_at IS NOT NULL FROM runs WHERE run_id = :run_id;

-- name: lock_run_for_signal
-- The run's status, under the caller's BEGIN IMMEDIATE (signals of one run are numbered
-- one at a time because the database has one writer).
SELECT status FROM runs WHERE run_id = :run_id;

-- name: lock_run_for_claim
-- The run a claim or requeue decides on, with records_at_last_start last (the caller's
-- BEGIN IMMEDIATE holds the lock).
SELECT run_id, workflow, version, prompt_version, queue, input, input_digest, codec_version,
       status, generation, fencing_token, owner, lease_expires_at, starts,
       starts_without_progress, outcome, error_type, error_message, park_reason, wake_at,
       created_at, updated_at, finished_at, incarnation, cancel_requested_at, cancel_reason,
       records_at_last_start
FROM runs WHERE run_id = :run_id;

-- name: finish_run
UPDATE runs
SET status = :status, outcome = :outcome, error_type = :error_type,
    error_message = :error_message, owner = NULL, lease_expires_at = NULL,
    park_reason = :park_reason, finished_at = :finished_at, updated_at = :now
WHERE run_id = :run_id AND fencing_token = :token;

-- name: drop_intents
DELETE FROM steps
WHERE run_id = :run_id AND generation = :generation AND status = 'intent'
  AND (:position IS NULL OR position = :position);

-- name: drop_record
-- A person's retry: the intent or failure at one position goes, so that step runs again
-- (under the same key). A result is never dropped.
DELETE FROM steps
WHERE run_id = :run_id AND generation = :generation AND position = :position
  AND status IN ('intent', 'failed');

-- name: insert_record
-- A copied record of a fork's new history (not fenced: the run was created in the same
-- transaction and nobody can hold it yet).
INSERT INTO steps (run_id, generation, position, kind, name, input_digest, status, output,
                   error_type, error_message, attempts, started_at, finished_at,
                   usage_tokens, usage_cost_usd, inputs)
VALUES (:run_id, 0, :position, :kind, :name, :input_digest, :status, :output,
        :error_type, :error_message, :attempts, :started_at, :finished_at,
        :usage_tokens, :usage_cost_usd, :inputs);

-- name: resolve_intent
UPDATE steps SET status = 'ok', output = :output, finished_at = :now
WHERE run_id = :run_id AND generation = :generation AND position = :position
  AND status = 'intent';

-- name: requeue_run
-- An operator's decision on a stuck run: a new fencing token fences out any driver that
-- still believes it owns the run.
-- A failed run's outcome is cleared: it runs again. The incarnation (so every key) stays.
-- So is a cancel asked for before the run failed or went in doubt (it never unwound):
-- the retry is the later decision (cancel again to stop it).
UPDATE runs
SET status = 'queued', fencing_token = fencing_token + 1, owner = NULL,
    lease_expires_at = NULL, starts_without_progress = 0, park_reason = NULL,
    wait_signal = NULL, outcome = NULL, error_type = NULL, error_message = NULL,
    finished_at = NULL, cancel_requested_at = NULL, cancel_reason = NULL,
    updated_at = :now
WHERE run_id = :run_id AND fencing_token = :expected_token
RETURNING run_id, workflow, version, prompt_version, queue, input, input_digest,
          codec_version, status, generation, fencing_token, owner, lease_expires_at, starts,
          starts_without_progress, outcome, error_type, error_message, park_reason, wake_at,
          created_at, updated_at, finished_at, incarnation, cancel_requested_at, cancel_reason;

-- name: running_per_queue
-- A run of a provably dead owner (:dead) holds no slot: a claim may take it over now.
SELECT queue, count(*) FROM runs
WHERE status = 'running' AND owner IS NOT NULL AND lease_expires_at > :now
  AND owner NOT IN (SELECT value FROM json_each(:dead))
GROUP BY queue;

-- name: next_runnable
-- The oldest run this worker may take, filtered entirely here (never a fixed window read
-- and filtered in Python, where older unclaimable runs could hide every runnable one):
-- its queue is open, its workflow served (:served maps names to the list of versions the
-- worker registers; a run without a version is served by any registration of its name:
-- versions route only when set), and it is queued, running with no owner, an
-- expired lease or an owner in :dead (this host's owners found dead in Python), or parked
-- and due. The status term matches the partial index runs_claimable, so finished runs
-- are never read.
SELECT run_id, workflow, version, prompt_version, queue, input, input_digest, codec_version,
       status, generation, fencing_token, owner, lease_expires_at, starts,
       starts_without_progress, outcome, error_type, error_message, park_reason, wake_at,
       created_at, updated_at, finished_at, incarnation, cancel_requested_at, cancel_reason
FROM runs
WHERE status IN ('queued', 'running', 'parked')
  AND queue IN (SELECT value FROM json_each(:queues))
  AND EXISTS (SELECT 1 FROM json_each(:served) AS s
              WHERE s.key = runs.workflow
                AND (runs.version IS NULL
                     OR EXISTS (SELECT 1 FROM json_each(s.value) AS v
                                WHERE v.value = runs.version)))
  AND (status = 'queued'
       OR (status = 'running' AND (owner IS NULL OR lease_expires_at <= :now
                                   OR owner IN (SELECT value FROM json_each(:dead))))
       OR (status = 'parked' AND wake_at IS NOT NULL AND wake_at <= :now))
ORDER BY created_at, run_id
LIMIT 1;

-- name: same_host_owners
-- The owners holding live leases on this host (:pattern from Owner.host_pattern): the
-- only ones whose liveness Python can judge (their pids are local). The IN term lets
-- the planner use runs_claimable, which holds no finished run.
SELECT DISTINCT owner FROM runs
WHERE status IN ('queued', 'running', 'parked') AND status = 'running'
  AND lease_expires_at > :now AND owner LIKE :pattern ESCAPE '\'
LIMIT :limit;

-- name: insert_event
-- The event takes the cursor :offset past the run's newest (read under the write lock
-- the transaction holds). One already stored under its dedupe (a write repeated after an
-- unknown outcome, or an emit replayed) is skipped: stored once, and no cursor spent.
INSERT INTO events (run_id, cursor, kind, position, data, at, dedupe)
SELECT :run_id, last_event + :offset, :kind, :position, :data, :at, :dedupe
FROM runs WHERE run_id = :run_id
ON CONFLICT (run_id, dedupe) DO NOTHING;

-- name: advance_last_event
UPDATE runs SET last_event = last_event + :added WHERE run_id = :run_id;

-- name: run_status
SELECT status FROM runs WHERE run_id = :run_id;

-- name: read_events
SELECT cursor, kind, position, at, data FROM events
WHERE run_id = :run_id AND cursor > :after
ORDER BY cursor
LIMIT :limit;

-- name: beat_worker
-- A worker's row, written at its start and on every beat; started_at stays its first.
INSERT INTO workers (owner, queues, started_at, beat_at, expires_at)
VALUES (:owner, :queues, :now, :now, :expires_at)
ON CONFLICT (owner) DO UPDATE
SET queues = excluded.queues, beat_at = excluded.beat_at, expires_at = excluded.expires_at;

-- name: prune_workers
DELETE FROM workers WHERE expires_at < :before;

-- name: drop_worker
DELETE FROM workers WHERE owner = :owner;

-- name: live_workers
SELECT owner, queues FROM workers WHERE expires_at > :now ORDER BY owner LIMIT :limit;

-- name: put_blob
-- A payload by content hash: each distinct value is stored once.
INSERT INTO blobs (digest, data, size, created_at)
VALUES (:digest, :data, :size, :now)
ON CONFLICT (digest) DO NOTHING;

-- name: get_blobs
SELECT digest, data FROM blobs WHERE digest IN (SELECT value FROM json_each(:digests));

-- name: lock_run_for_cancel
-- The run as a cancel finds it (the caller's write transaction holds the lock), with
-- whether its current generation holds any record (a queued run that never ran ends at
-- once).
SELECT run_id, workflow, version, prompt_version, queue, input, input_digest, codec_version,
       status, generation, fencing_token, owner, lease_expires_at, starts,
       starts_without_progress, outcome, error_type, error_message, park_reason, wake_at,
       created_at, updated_at, finished_at, incarnation, cancel_requested_at, cancel_reason,
       EXISTS (SELECT 1 FROM steps s
               WHERE s.run_id = runs.run_id AND s.generation = runs.generation)
FROM runs WHERE run_id = :run_id;

-- name: request_cancel
-- The durable cancel flag (the first reason stays). A parked run wakes now, to unwind.
UPDATE runs
SET cancel_requested_at = :now, cancel_reason = :reason,
    -- Due by the time it parked, if the canceller's clock says later (one running ahead
    -- of the workers' must not leave the run parked for the difference).
    wake_at = CASE WHEN status = 'parked' THEN min(:now, updated_at) ELSE wake_at END,
    updated_at = :now
WHERE run_id = :run_id AND cancel_requested_at IS NULL;

-- name: cancel_at_once
-- A run whose code will not run again without a person (queued and never ran; blocked,
-- quarantined, in doubt) ends cancelled in the cancel's transaction. The new token
-- fences out anything that still believes it holds the run.
UPDATE runs
SET status = 'cancelled', fencing_token = fencing_token + 1, owner = NULL,
    lease_expires_at = NULL, wake_at = NULL, error_type = :error_type,
    error_message = :error_message, park_reason = :park_reason, finished_at = :now,
    updated_at = :now
WHERE run_id = :run_id AND fencing_token = :expected_token;

-- name: next_signal_seq
-- The run's next signal number (1, 2, ...), read inside the write transaction that
-- inserts it (SQLite's single writer is the run's lock).
SELECT coalesce(max(seq), 0) + 1 FROM signals WHERE run_id = :run_id;

-- name: insert_signal
INSERT INTO signals (run_id, seq, name, data, sent_at)
VALUES (:run_id, :seq, :name, :data, :now);

-- name: taken_signal
-- The signal a wait at :consumer consumed already (its reply was lost, or the process
-- died before the wait's record was written): handed out again, never a second one.
SELECT seq, data FROM signals
WHERE run_id = :run_id AND name = :name AND consumed_by = :consumer
ORDER BY seq LIMIT 1;

-- name: oldest_signal
-- FIFO per name: the oldest signal of :name nobody consumed yet.
SELECT seq, data FROM signals
WHERE run_id = :run_id AND name = :name AND consumed_by IS NULL
ORDER BY seq LIMIT 1;

-- name: consume_signal
UPDATE signals SET consumed_by = :consumer WHERE run_id = :run_id AND seq = :seq;

-- name: release_renamed_signal
-- A wait at :consumer now asks for another name: what it took under the old name was
-- never recorded (the process died first, then a deploy changed the wait), so it goes
-- back to its queue instead of staying taken by a wait that no longer exists.
UPDATE signals SET consumed_by = NULL
WHERE run_id = :run_id AND consumed_by = :consumer AND name <> :name;

-- name: wake_for_signal
-- A run parked waiting for this signal's name (one of those in its wait_signal array) is
-- due now (a worker's next poll takes it).
-- Due by the time it parked, if the sender's clock says later: a sender whose clock runs
-- ahead of the workers' must not leave the run parked for the difference.
UPDATE runs SET wake_at = min(:now, updated_at), updated_at = :now
WHERE run_id = :run_id AND status = 'parked' AND wait_signal IS NOT NULL
  AND EXISTS (SELECT 1 FROM json_each(runs.wait_signal) WHERE value = :name)
  AND (wake_at IS NULL OR wake_at > min(:now, updated_at));

-- name: signal_sent
-- The signal.received event of an earlier attempt of this very send (its dedupe names
-- the send): a retry after an unknown commit outcome returns that signal's number.
SELECT data FROM events WHERE run_id = :run_id AND dedupe = :dedupe;
-- name: insert_spend
-- One ledger row per call that reported usage; the entry names the call, so a write
-- retried after an unknown outcome inserts nothing.
INSERT INTO spend (run_id, entry, generation, position, attempt, fencing_token, tokens,
                   input_tokens, output_tokens, cost_usd, recorded_at)
VALUES (:run_id, :entry, :generation, :position, :attempt, :token, :tokens,
        :input_tokens, :output_tokens, :cost_usd, :now)
ON CONFLICT (run_id, entry) DO NOTHING;

-- name: get_spend
-- The run's spend (sums over its ledger rows, all generations) and its stored budget.
SELECT coalesce(sum(tokens), 0), coalesce(sum(input_tokens), 0),
       coalesce(sum(output_tokens), 0), coalesce(sum(cost_usd), 0), count(*),
       (SELECT count(*) FROM budgets b WHERE b.run_id = :run_id),
       (SELECT b.tokens FROM budgets b WHERE b.run_id = :run_id),
       (SELECT b.cost_usd FROM budgets b WHERE b.run_id = :run_id)
FROM spend WHERE run_id = :run_id;

-- name: set_budget
-- Fenced: written only while the token is current (no row changed: a stale token).
INSERT INTO budgets (run_id, tokens, cost_usd, set_at)
SELECT run_id, :tokens, :cost_usd, :now FROM runs
WHERE run_id = :run_id AND fencing_token = :token
ON CONFLICT (run_id) DO UPDATE
SET tokens = excluded.tokens, cost_usd = excluded.cost_usd, set_at = excluded.set_at;

-- name: put_approval
-- A request's row, written with the park that waits on it; the same request parked again
-- (a replay) keeps its row, decided or not.
INSERT INTO approvals (run_id, request_id, action, args, digest, requested_at, expires_at)
VALUES (:run_id, :request_id, :action, :args, :digest, :requested_at, :expires_at)
ON CONFLICT (run_id, request_id) DO NOTHING;

-- name: get_approval
SELECT run_id, request_id, action, args, digest, requested_at, expires_at, decided_at,
       outcome, by_name, note
FROM approvals WHERE run_id = :run_id AND request_id = :request_id;

-- name: pending_approvals
-- Undecided requests of runs still going (a run that ended, cancelled say, leaves its
-- request undecided for ever: nobody waits for it; nor does a run being cancelled, which
-- unwinds when next driven), oldest first.
SELECT a.run_id, a.request_id, a.action, a.args, a.digest, a.requested_at, a.expires_at,
       a.decided_at, a.outcome, a.by_name, a.note
FROM approvals a JOIN runs r ON r.run_id = a.run_id
WHERE a.outcome IS NULL
  AND r.status NOT IN ('completed', 'failed', 'cancelled', 'continued')
  AND r.cancel_requested_at IS NULL
  AND (:run_id IS NULL OR a.run_id = :run_id)
ORDER BY a.requested_at, a.run_id, a.request_id
LIMIT :limit;

-- name: lock_run_status
-- The run a person decides for: its status and whether a cancel was asked for (its run
-- unwinds: nobody uses a decision). The caller's BEGIN IMMEDIATE holds the lock.
SELECT status, cancel_requested_at IS NOT NULL FROM runs WHERE run_id = :run_id;

-- name: decide_approval
UPDATE approvals
SET outcome = :outcome, by_name = :by, note = :note, decided_at = :now
WHERE run_id = :run_id AND request_id = :request_id AND outcome IS NULL;

-- name: expire_approval
-- The run's driver found the request past its expiry: the expiry is the decision, taken
-- once (a person's decision committed first wins instead).
UPDATE approvals
SET outcome = 'expired', decided_at = expires_at
WHERE run_id = :run_id AND request_id = :request_id AND outcome IS NULL
  AND expires_at IS NOT NULL AND expires_at <= :now;

-- name: wake_for_approval
-- A decision wakes the run parked on it (a run not parked yet sees the decision when it
-- parks: park_run checks for it).
UPDATE runs SET wake_at = :now, updated_at = :now
WHERE run_id = :run_id AND status = 'parked';
