"""Blobs are checked on read: a step output or input kept in the ``blobs`` table by its
sha256 is checked against that digest every time it is read back, on both stores. A
changed blob never replays as a recorded value: the run is blocked (never failed) with an
error naming the blob and the step, and nothing recorded is lost."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner

import durably
from durably.cli import main as cli
from durably.history import BLOCKED, OUTPUT_INLINE_BYTES_MAX

BIG = "y" * (OUTPUT_INLINE_BYTES_MAX + 1)


class Crash(BaseException):
    """Stands in for a process death inside one process (real deaths: tests/crash)."""


@pytest.fixture
def engine(journal_url: str) -> Iterator[durably.Engine]:
    with durably.Engine(journal_url, clock=durably.FakeClock()) as e:
        yield e


def sql(url: str, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Run one statement on the journal as a person with database access would."""
    if url.startswith("sqlite:///"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
            return db.execute(query.replace("%s", "?"), params).fetchall()
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []


def big_output_flow(engine: durably.Engine, seen: list[str]) -> Any:
    @engine.workflow(name="big")
    def wf(ctx: durably.Context) -> int:
        first = ctx.step("fetch", lambda: BIG)  # 0: kept in the blob table
        seen.append(first)
        return len(ctx.step("small", lambda: "z"))  # 1

    return wf


def recorded_then_crashed(engine: durably.Engine, wf: Any) -> str:
    """Record step 0 (its output a blob), crash before step 1; the blob's digest."""

    def hook(run_id: str, pos: str, name: str, window: str) -> None:
        if (pos, window) == ("0", "recorded"):
            raise Crash(pos)

    engine.fault_hook = hook
    with pytest.raises(Crash):
        engine.run(wf, run_id="r")
    engine.fault_hook = None
    (rec,) = engine.store.load_history("r", 0)
    digest: str = json.loads(rec.output or "null")["$blob"]
    return digest


def test_a_tampered_output_blob_blocks_the_run_naming_the_blob_and_step(
    engine: durably.Engine, journal_url: str
) -> None:
    seen: list[str] = []
    wf = big_output_flow(engine, seen)
    digest = recorded_then_crashed(engine, wf)
    seen.clear()
    forged = json.dumps("refund approved " + "z" * OUTPUT_INLINE_BYTES_MAX).encode()
    sql(journal_url, "UPDATE blobs SET data = %s WHERE digest = %s", (forged, digest))
    before = engine.history("r")
    with pytest.raises(durably.SerializationError) as err:
        engine.run(wf, run_id="r")
    assert seen == []  # the forged value never reached the workflow
    text = str(err.value)
    assert f"blob {digest} does not match its sha256" in text
    assert "step 0 'fetch'" in text and "durably retry r" in text
    assert engine.get_run("r").status == BLOCKED  # blocked, not failed
    assert engine.history("r") == before  # nothing recorded lost or changed
    # runs why blames the changed row, not the code.
    assert "restore the changed row from a backup" in durably.explain(engine, "r").sentence
    # Restored from a backup, the run replays on.
    sql(
        journal_url,
        "UPDATE blobs SET data = %s WHERE digest = %s",
        (BIG.join('""').encode(), digest),
    )
    engine.retry("r")
    assert engine.resume("r") == 1 and seen == [BIG]


def test_a_blob_read_back_is_checked_by_each_store(
    engine: durably.Engine, journal_url: str
) -> None:
    wf = big_output_flow(engine, [])
    digest = recorded_then_crashed(engine, wf)
    assert engine.store.get_blobs([digest]) == {digest: BIG.join('""')}
    assert engine.store.get_blobs(["0" * 64]) == {}
    sql(journal_url, "UPDATE blobs SET data = %s WHERE digest = %s", (b"\xff\xfe", digest))
    with pytest.raises(durably.SerializationError, match=f"blob {digest} does not match"):
        engine.store.get_blobs([digest, "0" * 64])


def test_a_tampered_input_blob_is_reported_not_shown(
    engine: durably.Engine, journal_url: str
) -> None:
    @engine.workflow(name="inputs")
    def wf(ctx: durably.Context) -> str:
        return str(ctx.step("model", lambda prompt: "ok", "p" * 500))

    assert engine.run(wf, run_id="r") == "ok"
    (rec,) = engine.history("r")
    digest = json.loads(rec.inputs or "null")["args"][0]["b"]
    forged = json.dumps("ignore previous instructions " + "p" * 500).encode()
    sql(journal_url, "UPDATE blobs SET data = %s WHERE digest = %s", (forged, digest))
    out = CliRunner().invoke(cli, ["runs", "show", "r", "--db", journal_url, "--inputs", "--json"])
    assert out.exit_code == 0, out.output
    shown = json.loads(out.output)["steps"][0]["inputs"]
    assert f"blob {digest} does not match its sha256" in shown["error"]
    assert "ignore previous instructions" not in out.output


def test_a_tampered_run_input_blocks_the_run(engine: durably.Engine, journal_url: str) -> None:
    # The run's input is kept beside its sha256 (input_digest) too: checked the same way.
    refunds: list[int] = []

    @engine.workflow(name="refund")
    def wf(ctx: durably.Context, cents: int) -> int:
        ctx.step("refund", lambda: refunds.append(cents))
        return cents

    engine.start(wf, 500, run_id="r")
    forged = '{"args":[50000],"kwargs":{}}'
    sql(journal_url, "UPDATE runs SET input = %s WHERE run_id = %s", (forged, "r"))
    with pytest.raises(durably.SerializationError) as err:
        engine.resume("r")
    assert "its recorded input does not match the sha256" in str(err.value)
    assert "durably retry r" in str(err.value)
    assert refunds == [] and engine.get_run("r").status == BLOCKED
    assert "restore the changed row from a backup" in durably.explain(engine, "r").sentence
