-- PostgreSQL queries of the store's meta: the schema marker and migration lock.
-- Parameters are psycopg named placeholders
-- (%(name)s). Parameters that can be NULL or that sit in a SELECT list carry an explicit
-- cast: PostgreSQL cannot infer the type of an untyped NULL there.

-- name: meta_lock
-- Serialises migrations of one schema across every process that opens it at once; the
-- lock is per schema (keyed on its name) and ends with the transaction.
SELECT pg_advisory_xact_lock(hashtext('durably.migrate'), hashtext(current_schema()));

-- name: current_schema
SELECT current_schema();

-- name: own_tables
-- durably's own tables in the store's schema; other tables of a shared schema are none of
-- durably's business.
SELECT table_name FROM information_schema.tables
WHERE table_schema = current_schema()
  AND table_name IN ('durably_meta', 'runs', 'steps', 'signals', 'events', 'blobs');

-- name: get_meta
SELECT value FROM durably_meta WHERE key = %(key)s;

-- name: set_meta
INSERT INTO durably_meta (key, value) VALUES (%(key)s, %(value)s)
ON CONFLICT (key) DO UPDATE SET value = excluded.value;
