"""``engine.delete_run(run_id, redact=True)`` on every store: the run keeps its shape and
lists, refuses to run, retry, fork or replay (``RunRedacted``), and no planted secret is
left in any table, nor (SQLite, after a checkpoint and VACUUM) in any file of the
journal; a blob another run cites stays. ``delete_run`` refuses a live run."""

from __future__ import annotations

import glob
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner

import durably
from durably.cli import main as cli
from durably.clock import FakeClock
from durably.inspect.replaycheck import check_run
from tests.contract.journal_rows import dump, run_rows, tables

SECRET = "s3cret-5551234-ana@example.org"
SHARED = "a shared system prompt " + "p" * 2_000


def lookup(who: str) -> dict[str, str]:
    return {"found": who}


def refuse(who: str) -> None:
    raise ValueError(f"no account for {who}")


@pytest.fixture
def engine(journal_url: str) -> Iterator[durably.Engine]:
    with durably.Engine(journal_url, clock=FakeClock(), park_wait_s=0) as e:

        @e.workflow(name="secretive")
        def secretive(ctx: durably.Context, who: str, mode: str) -> dict[str, object]:
            ctx.step("lookup", lookup, who)  # inline input and output
            ctx.step("big", lookup, who + " " + "x" * 2_000)  # blob input and output
            ctx.step("chat", len, [{"role": "system", "content": SHARED}, who])  # nodes
            if mode == "fail":
                ctx.step("refuse", durably.step(retries=0)(refuse), who)
            ctx.emit("note", {"said": who})
            if mode == "wait":
                got = ctx.wait_for_signal("go")
                decision = ctx.request_approval(f"send to {who}", {"to": who})
                return {"echo": who, "got": got, "ok": decision.approved}
            return {"echo": who}

        yield e


def _plant(engine: durably.Engine) -> None:
    """Three runs holding the secret everywhere a value goes; one more sharing a blob."""
    for _ in range(3):
        try:
            engine.run("secretive", SECRET, "wait", run_id="main")
        except durably.RunParked:
            pass
        if engine.get_run("main").status == "completed":
            break
        if not engine.pending_approvals("main"):
            engine.signal("main", "go", {"from": SECRET})
        else:
            (req,) = engine.pending_approvals("main")
            engine.approve("main", req.request_id, digest=req.digest, by=SECRET, note=SECRET)
    assert engine.get_run("main").status == "completed"
    with pytest.raises(durably.WorkflowFailed):
        engine.run("secretive", SECRET, "fail", run_id="failed")
    engine.start("secretive", SECRET, "plain", run_id="cancelled")
    engine.cancel("cancelled", reason=f"asked by {SECRET}")
    engine.run("secretive", "someone else", "plain", run_id="other")


def _shape(engine: durably.Engine, run_id: str) -> list[tuple[str, str, str, str, int]]:
    """What redaction keeps of each step (a name up to its ':', the rest of an approval's
    name being its action, a value)."""
    return [
        (r.position, r.name.split(":")[0], r.kind, r.status, r.attempts)
        for r in engine.history(run_id)
    ]


def _secret_rows(url: str) -> list[str]:
    return [
        f"{table}: {row!r:.200}"
        for table, rows in dump(url).items()
        for row in rows
        if SECRET in repr(row)
    ]


def test_a_redacted_run_keeps_its_shape_refuses_to_run_and_no_secret_is_left(
    engine: durably.Engine,
) -> None:
    url = engine.url
    _plant(engine)
    assert _secret_rows(url), "the secret was not planted"
    shapes = {rid: _shape(engine, rid) for rid in ("main", "failed", "cancelled")}
    other_rows = run_rows(url, "other")
    for rid in ("main", "failed", "cancelled"):
        engine.delete_run(rid, redact=True, by="dpo@example.org")

    assert _secret_rows(url) == []
    assert run_rows(url, "other") == other_rows
    assert engine.run("secretive", "someone else", "plain", run_id="other") == {
        "echo": "someone else"
    }
    listed = {r.run_id: r.status for r in engine.list_runs().runs}
    assert listed == {
        "main": "completed",
        "failed": "failed",
        "cancelled": "cancelled",
        "other": "completed",
    }
    for rid, shape in shapes.items():
        assert _shape(engine, rid) == shape
        red = engine.redaction(rid)
        assert red is not None and red.redacted_by == "dpo@example.org"
    with pytest.raises(durably.RunRedacted) as info:
        engine.run("secretive", SECRET, "wait", run_id="main")
    assert isinstance(info.value, durably.RunFinished)
    for refused in (
        lambda: engine.retry("failed"),
        lambda: engine.fork("main", at=1),
        lambda: engine.resume("main"),
        lambda: check_run(engine, engine.get_run("main")),
    ):
        with pytest.raises(durably.RunRedacted, match="redacted"):
            refused()
    shown = CliRunner().invoke(cli, ["runs", "show", "main", "--db", url])
    assert shown.exit_code == 0, shown.output
    assert "redacted at" in shown.output and "dpo@example.org" in shown.output
    why = CliRunner().invoke(cli, ["runs", "why", "failed", "--db", url])
    assert why.exit_code == 0 and "redacted at" in why.output, why.output
    engine.close()
    _no_secret_on_disk(url)


def _no_secret_on_disk(url: str) -> None:
    """SQLite: every file of the journal after a checkpoint and VACUUM. PostgreSQL: the
    row data of every table (live rows, by SQL) after VACUUM FULL; and, where the
    pageinspect extension can be created, the raw pages of every table and its TOAST
    table, dead tuples included."""
    needle = SECRET.encode()
    if url.startswith("sqlite:///"):
        import sqlite3

        path = url[len("sqlite:///") :]
        conn = sqlite3.connect(path)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("VACUUM")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()
        files = glob.glob(path + "*")
        assert files and all(os.path.getsize(f) >= 0 for f in files)
        found = []
        for f in files:
            with open(f, "rb") as fh:
                if needle in fh.read():
                    found.append(f)
        assert found == [], f"the secret is still in {found}"
        return
    import psycopg

    with psycopg.connect(url, autocommit=True) as pg:
        names = tables(url)
        for t in names:
            pg.execute(f"VACUUM FULL {t}")
        for t in names:
            hit = pg.execute(
                f"SELECT count(*) FROM {t} x WHERE position(%s in x::text) > 0", (SECRET,)
            ).fetchone()
            assert hit == (0,), t
        (blob_hits,) = pg.execute(
            "SELECT count(*) FROM blobs WHERE position(%s::bytea in data) > 0", (needle,)
        ).fetchone()  # type: ignore[misc]
        assert blob_hits == 0
        try:
            pg.execute("CREATE EXTENSION IF NOT EXISTS pageinspect")
        except psycopg.Error:
            return  # not available here: the live rows above are what could be checked
        # VACUUM FULL keeps a dead row version that a snapshot of another session of the
        # database (another test, another process) may still see: a transaction open
        # when the redaction committed. Such snapshots are short; vacuum again until
        # none is left (bounded), then no page may hold the secret.
        for _ in range(40):
            found = _pages_with(pg, needle)
            if not found:
                break
            time.sleep(0.25)
            for t in names:
                pg.execute(f"VACUUM FULL {t}")
        assert found == [], f"the secret is in a page of {found}"


def _pages_with(pg: Any, needle: bytes) -> list[str]:
    """The relations of the schema (tables and their TOAST) with a page holding
    ``needle``, read raw with pageinspect."""
    rels = pg.execute(
        "SELECT c.oid::regclass::text FROM pg_class c JOIN pg_namespace n"
        " ON n.oid = c.relnamespace WHERE n.nspname = current_schema() AND c.relkind = 'r'"
        " UNION SELECT t.reltoastrelid::regclass::text FROM pg_class t JOIN pg_namespace n"
        " ON n.oid = t.relnamespace WHERE n.nspname = current_schema()"
        " AND t.reltoastrelid <> 0"
    ).fetchall()
    found = []
    for (rel,) in rels:
        (pages,) = pg.execute(
            "SELECT pg_relation_size(%s::regclass) / current_setting('block_size')::int",
            (rel,),
        ).fetchone()
        for block in range(int(pages)):
            (raw,) = pg.execute("SELECT get_raw_page(%s, %s)", (rel, block)).fetchone()
            if needle in bytes(raw):
                found.append(rel)
                break
    return found


def test_delete_run_refuses_a_live_run_and_leaves_it_unchanged(engine: durably.Engine) -> None:
    url = engine.url
    engine.start("secretive", SECRET, "plain", run_id="queued")
    rows = run_rows(url, "queued")
    for redact in (False, True):
        with pytest.raises(durably.RunNotFinished, match="durably cancel"):
            engine.delete_run("queued", redact=redact)
    assert run_rows(url, "queued") == rows
    with pytest.raises(durably.RunNotFound):
        engine.delete_run("nobody")
    engine.cancel("queued")
    engine.delete_run("queued")
    assert run_rows(url, "queued") == {}
    with pytest.raises(durably.RunPruned, match="deleted"):
        engine.get_run("queued")
    with pytest.raises(durably.RunPruned):
        engine.delete_run("queued")
    # A redacted run deleted: its input is unknown, so any input is refused as pruned.
    engine.run("secretive", "x", "plain", run_id="forgotten")
    engine.delete_run("forgotten", redact=True)
    engine.delete_run("forgotten")
    for given in ("x", "y"):
        with pytest.raises(durably.RunPruned):
            engine.run("secretive", given, "plain", run_id="forgotten")


def test_a_redaction_committed_while_a_fork_or_a_retry_is_made_wins(
    engine: durably.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``fork`` and ``retry`` checked for a redaction when they read the run, then wrote
    in a transaction of their own: a redaction committed in between was not seen. The
    fork then created a new run holding the values just forgotten (its input, copied
    records: the request to forget defeated), and the retry queued the redacted run for a
    worker. Each now checks again under the run's lock in its writing transaction."""
    store = engine.store
    for run_id, method in (("forked", "fork_run"), ("retried", "requeue")):
        with pytest.raises(durably.WorkflowFailed):
            engine.run("secretive", SECRET, "fail", run_id=run_id)
        real = getattr(store, method)

        def redact_first(
            *args: object, _real: object = real, _id: str = run_id, **kw: object
        ) -> object:
            engine.delete_run(_id, redact=True, by="dpo")  # a redaction commits just now
            return _real(*args, **kw)  # type: ignore[operator]

        monkeypatch.setattr(store, method, redact_first)
    with pytest.raises(durably.RunRedacted):
        engine.fork("forked", at=1)
    with pytest.raises(durably.RunRedacted):
        engine.retry("retried")
    assert _secret_rows(engine.url) == []
    assert engine.get_run("retried").status == "failed"
    assert sorted(r.run_id for r in engine.list_runs().runs) == ["forked", "retried"]
    # A source deleted while the fork is made: no copy of a run just deleted.
    engine.run("secretive", "plain", "plain", run_id="deleted")
    unpatched = type(store).fork_run

    def delete_first(*args: object, **kw: object) -> object:
        engine.delete_run("deleted")
        return unpatched(store, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "fork_run", delete_first)
    with pytest.raises(durably.RunPruned):
        engine.fork("deleted", at=1)
    assert sorted(r.run_id for r in engine.list_runs().runs) == ["forked", "retried"]


def test_a_crash_between_a_redaction_and_its_sweep_leaves_no_secret_for_good(
    engine: durably.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The redaction (and a delete, and each prune batch) commits, then its blobs are
    swept in later transactions. A crash in between left blobs no record cites any more,
    which no later sweep ever looked at (its candidates came only from the runs it
    removed): the blob holding the secret stayed for good, and redacting again found
    nothing to sweep. The blobs a removal stops citing are now written down in its
    transaction, and any later prune or delete sweeps what a crash left."""
    engine.run("secretive", SECRET, "plain", run_id="r")
    store = engine.store
    real = store._sweep  # type: ignore[attr-defined]

    def crash(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt  # the process dies after the redaction committed

    monkeypatch.setattr(store, "_sweep", crash)
    with pytest.raises(KeyboardInterrupt):
        engine.delete_run("r", redact=True, by="dpo")
    monkeypatch.setattr(store, "_sweep", real)
    assert engine.redaction("r") is not None
    assert _secret_rows(engine.url) != []  # the blob holding it, cited by nothing now
    engine.delete_run("r", redact=True, by="dpo")  # asked again: the sweep is made up
    assert _secret_rows(engine.url) == []
