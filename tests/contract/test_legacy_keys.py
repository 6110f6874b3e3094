"""A journal written before incarnations (schema 0001), upgraded in place, on every store.

An effect in doubt from before the upgrade must be retried under the key it was first sent
with (``run_id:position``): under a new key the receiver could not recognise the retry and
would perform the effect twice. Runs created after the upgrade get incarnation keys.
"""

from __future__ import annotations

import hashlib
import sqlite3

import pytest

import durably
from durably import codec
from durably.store.sqlfiles import migrations

INPUT = codec.dumps({"args": [], "kwargs": {}})
# A run row and its history as durably wrote them under schema 0001: the driver died
# between sending the charge and recording it, so position 1 holds an intent.
OLD_RUN = (
    "INSERT INTO runs (run_id, workflow, version, prompt_version, queue, input, input_digest,"
    " codec_version, status, fencing_token, starts, created_at, updated_at)"
    " VALUES ('legacy-1', 'checkout', NULL, NULL, 'default', {p}, {p}, 1, 'running', 1, 1,"
    " 1.0, 1.0)"
)
OLD_STEP = (
    "INSERT INTO steps (run_id, generation, position, kind, name, input_digest, status,"
    " output, attempts, started_at, finished_at)"
    " VALUES ('legacy-1', 0, {p}, 'step', {p}, {p}, {p}, {p}, 1, 1.0, {p})"
)
STEPS = [
    ("0", "plan", codec.digest("plan", (), {}), "ok", '"p"', 1.0),
    ("1", "charge", codec.digest("charge", (80,), {}), "intent", None, None),
]


def write_0001_journal(url: str) -> None:
    """Create a schema-0001 journal at ``url`` holding the run above, with plain SQL."""
    first = migrations("sqlite" if url.startswith("sqlite") else "postgres")[0]
    assert first.version == 1
    run_params = (INPUT, hashlib.sha256(INPUT.encode()).hexdigest())
    if url.startswith("sqlite"):
        conn = sqlite3.connect(url[len("sqlite:///") :])
        with conn:
            conn.executescript(first.sql)
            conn.execute("PRAGMA user_version = 1")
            conn.execute("INSERT INTO durably_meta VALUES ('app', 'durably')")
            conn.execute(OLD_RUN.format(p="?"), run_params)
            for row in STEPS:
                conn.execute(OLD_STEP.format(p="?"), row)
        conn.close()
        return
    import psycopg

    with psycopg.connect(url, autocommit=True) as pg, pg.transaction():
        pg.execute(first.sql.encode())
        pg.execute("INSERT INTO durably_meta VALUES ('app', 'durably'), ('schema_version', '1')")
        pg.execute(OLD_RUN.format(p="%s"), run_params)
        for row in STEPS:
            pg.execute(OLD_STEP.format(p="%s"), row)


# The journal is written at schema 0001 by hand, then upgraded: an empty schema.
@pytest.mark.pg_empty_schema
def test_an_effect_in_doubt_from_before_the_upgrade_keeps_its_old_key(store_url: str) -> None:
    write_0001_journal(store_url)
    engine = durably.Engine(store_url)  # migrates 0001 -> now
    calls: list[str] = []
    sent: list[str] = []

    def plan() -> str:
        calls.append("plan")
        return "p"

    @durably.step(effect=True)
    def charge(amount: int, *, idempotency_key: str) -> str:
        sent.append(idempotency_key)
        return f"ch-{amount}"

    @engine.workflow(name="checkout")
    def checkout(ctx: durably.Context) -> str:
        ctx.step("plan", plan)
        return ctx.step("charge", charge, 80)

    try:
        assert engine.get_run("legacy-1").incarnation is None
        assert engine.run(checkout, run_id="legacy-1") == "ch-80"
        # Replayed, then retried under the key the charge was first sent with.
        assert calls == [] and sent == ["legacy-1:1"]
        assert engine.get_run("legacy-1").incarnation is None
        # A run created after the upgrade has an incarnation in its keys.
        engine.run(checkout, run_id="new-1")
        incarnation = engine.get_run("new-1").incarnation
        assert incarnation is not None and sent[1] == f"new-1:{incarnation}:1"
    finally:
        engine.close()
