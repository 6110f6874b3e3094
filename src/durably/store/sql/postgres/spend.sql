-- PostgreSQL queries of the store's spend: the ledger and budgets.
-- Parameters are psycopg named placeholders
-- (%(name)s). Parameters that can be NULL or that sit in a SELECT list carry an explicit
-- cast: PostgreSQL cannot infer the type of an untyped NULL there.

-- name: insert_spend
-- One ledger row per call that reported usage; the entry names the call, so a write
-- retried after an unknown outcome inserts nothing.
INSERT INTO spend (run_id, entry, generation, position, attempt, fencing_token, tokens,
                   input_tokens, output_tokens, cost_usd, recorded_at)
VALUES (%(run_id)s, %(entry)s, %(generation)s, %(position)s, %(attempt)s, %(token)s, %(tokens)s,
        %(input_tokens)s, %(output_tokens)s, %(cost_usd)s, %(now)s)
ON CONFLICT (run_id, entry) DO NOTHING;

-- name: get_spend
-- The run's spend (sums over its ledger rows, all generations) and its stored budget.
SELECT coalesce(sum(tokens), 0)::bigint, coalesce(sum(input_tokens), 0)::bigint,
       coalesce(sum(output_tokens), 0)::bigint, coalesce(sum(cost_usd), 0)::double precision,
       count(*),
       (SELECT count(*) FROM budgets b WHERE b.run_id = %(run_id)s),
       (SELECT b.tokens FROM budgets b WHERE b.run_id = %(run_id)s),
       (SELECT b.cost_usd FROM budgets b WHERE b.run_id = %(run_id)s)
FROM spend WHERE run_id = %(run_id)s;

-- name: set_budget
-- Fenced: written only while the token is current (no row changed: a stale token).
INSERT INTO budgets (run_id, tokens, cost_usd, set_at)
SELECT run_id, %(tokens)s::bigint, %(cost_usd)s::double precision, %(now)s FROM runs
WHERE run_id = %(run_id)s AND fencing_token = %(token)s
ON CONFLICT (run_id) DO UPDATE
SET tokens = excluded.tokens, cost_usd = excluded.cost_usd, set_at = excluded.set_at;
