-- SQLite queries of the store's spend: the ledger and budgets.
-- Parameters are named (:name).

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
