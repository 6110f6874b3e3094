"""Retention on every store: prune never touches a run that is not finished, frees the
blobs only pruned runs cited and keeps shared ones, changes nothing on a dry run; a
pruned run id refuses to run again (no effect repeats); citing a blob and sweeping it
serialise; the background pruner holds a lease."""

from __future__ import annotations

import datetime as dt
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import durably
from durably.clock import FakeClock
from tests.contract.journal_rows import dump, run_rows

BIG = 2_000  # characters: above the inline limit, so the argument goes to the blob table
KINDS = ("ok", "fail", "park", "queued", "cancelled", "blocked", "in_doubt", "quarantined")


def _engine(url: str, clock: FakeClock, effects: list[str] | None = None) -> durably.Engine:
    engine = durably.Engine(url, clock=clock, park_wait_s=0)
    sink = effects if effects is not None else []

    def effect(payload: str, *, idempotency_key: str) -> int:
        sink.append(idempotency_key)
        return len(payload)

    @engine.workflow(name="job")
    def job(ctx: durably.Context, kind: str, payload: str) -> str:
        ctx.step("effect", durably.step(effect=True)(effect), payload)
        ctx.step("chat", len, [{"role": "system", "content": "s" * BIG}, payload])
        if kind == "fail":
            raise ValueError("boom")
        if kind == "park":
            ctx.sleep(3600)
        return "done"

    return engine


def _make(engine: durably.Engine, clock: FakeClock, run_id: str, kind: str, payload: str) -> None:
    """A run ending in ``kind`` (the statuses no workflow reaches quickly are written on
    a completed run's row, with a finished_at in the past: prune must go by status)."""
    clock.advance(10)
    if kind in ("queued", "cancelled"):
        engine.start("job", kind, payload, run_id=run_id)
        if kind == "cancelled":
            engine.cancel(run_id, reason="no longer needed")
        return
    try:
        engine.run("job", kind, payload, run_id=run_id)
    except (durably.WorkflowFailed, durably.RunParked):
        pass
    if kind in ("blocked", "in_doubt", "quarantined"):
        _set_status(engine.url, run_id, kind, clock.time())


def _set_status(url: str, run_id: str, status: str, finished_at: float) -> None:
    from tests.contract.journal_rows import execute

    execute(
        url,
        "UPDATE runs SET status = {p}, finished_at = {p} WHERE run_id = {p}",
        (status, finished_at, run_id),
    )


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def engine(journal_url: str, clock: FakeClock) -> Iterator[durably.Engine]:
    with _engine(journal_url, clock) as e:
        yield e


_FINISHED = {"ok": "completed", "fail": "failed", "cancelled": "cancelled"}


@settings(
    max_examples=4,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    kinds=st.lists(st.sampled_from(KINDS), min_size=1, max_size=6),
    cut=st.integers(min_value=0, max_value=6),
    statuses=st.sets(st.sampled_from(("completed", "failed", "cancelled")), min_size=1),
)
def test_prune_never_touches_a_run_that_is_not_finished(
    engine: durably.Engine,
    clock: FakeClock,
    kinds: list[str],
    cut: int,
    statuses: set[str],
) -> None:
    url = engine.url
    prefix = f"p{clock.time():.0f}-"
    ids = [f"{prefix}{i}" for i in range(len(kinds))]
    for run_id, kind in zip(ids, kinds, strict=True):
        _make(engine, clock, run_id, kind, f"payload {run_id} " + "x" * BIG)
    before_all = {run.run_id: run for run in engine.list_runs(limit=1000).runs}
    live = {
        rid: run_rows(url, rid)
        for rid, r in before_all.items()
        if r.status not in _FINISHED.values()
    }
    cutoff = clock.time() - 10 * (len(kinds) - min(cut, len(kinds))) + 5
    report = engine.prune(cutoff, status=sorted(statuses))
    after = {run.run_id: run for run in engine.list_runs(limit=1000).runs}
    for rid, rows in live.items():
        assert rid in after, f"prune deleted {before_all[rid].status} run {rid}"
        assert run_rows(url, rid) == rows, f"prune changed {before_all[rid].status} run {rid}"
    for rid, run in before_all.items():
        due = run.status in statuses and run.finished_at is not None and run.finished_at < cutoff
        assert (rid in report.run_ids) == due, (rid, run.status, run.finished_at, cutoff)
        assert (rid in after) == (not due)
        if due:
            with pytest.raises(durably.RunPruned):
                engine.get_run(rid)


def test_prune_frees_unshared_blobs_keeps_shared_ones_and_dry_run_changes_nothing(
    engine: durably.Engine, clock: FakeClock
) -> None:
    url = engine.url
    shared = "shared " + "s" * BIG
    _make(engine, clock, "old", "ok", "only the old run's " + "o" * BIG)
    _make(engine, clock, "old-shared", "ok", shared)
    clock.advance(3600)
    _make(engine, clock, "new-shared", "ok", shared)
    blobs_before = {r[0] for r in dump(url)["blobs"]}

    whole = dump(url)
    dry = engine.prune(dt.timedelta(minutes=30), dry_run=True)
    assert dump(url) == whole, "a dry run changed the journal"
    assert dry.dry_run and sorted(dry.run_ids) == ["old", "old-shared"]

    report = engine.prune(dt.timedelta(minutes=30))
    assert (report.runs, report.blobs, report.blob_bytes) == (dry.runs, dry.blobs, dry.blob_bytes)
    blobs_after = {r[0] for r in dump(url)["blobs"]}
    assert report.blobs == len(blobs_before - blobs_after) > 0
    # The run still here reads every value it recorded (its shared blobs were kept).
    for rec in engine.history("new-shared"):
        if rec.inputs:
            from durably import inputs

            assert inputs.load(rec.inputs, engine.blobs)
    assert engine.run("job", "ok", shared, run_id="new-shared") == "done"
    # Every row of the old runs went, in every table that holds a run's rows.
    assert run_rows(url, "old") == run_rows(url, "old-shared") == {}
    assert {t.run_id for t in engine.list_tombstones()} == {"old", "old-shared"}


def test_a_pruned_run_id_refuses_to_run_again_and_no_effect_repeats(
    journal_url: str, clock: FakeClock
) -> None:
    effects: list[str] = []
    with _engine(journal_url, clock, effects) as engine:
        _make(engine, clock, "alert-42", "ok", "page the on-call")
        assert len(effects) == 1
        clock.advance(100)
        assert engine.prune(dt.timedelta(seconds=50)).run_ids == ("alert-42",)
        with pytest.raises(durably.RunPruned, match="alert-42") as info:
            engine.run("job", "ok", "page the on-call", run_id="alert-42")
        assert isinstance(info.value, durably.RunFinished)
        with pytest.raises(durably.RunPruned):
            engine.start("job", "ok", "page the on-call", run_id="alert-42")
        with pytest.raises(durably.RunConflict):
            engine.run("job", "ok", "other input", run_id="alert-42")
        for call in (
            lambda: engine.signal("alert-42", "go"),
            lambda: engine.cancel("alert-42"),
            lambda: engine.get_run("alert-42"),
            lambda: engine.events("alert-42"),
        ):
            with pytest.raises(durably.RunPruned):
                call()
        assert len(effects) == 1, "a pruned run's effect ran again"
        assert [r.run_id for r in engine.list_runs().runs] == []
        # Only an explicit prune of tombstones frees the id.
        clock.advance(60)
        assert engine.prune_tombstones(dt.timedelta(seconds=10)) == 1
        assert engine.run("job", "ok", "page the on-call", run_id="alert-42") == "done"


def test_citing_a_blob_between_mark_and_sweep_keeps_it(
    engine: durably.Engine, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The window the touch count closes: run B cites the pruned run's blob after the
    mark read the journal and before the sweep deletes (B's write, a put_blob on a
    stored blob, counts a touch under the row's lock)."""
    payload = "the same long argument " + "a" * BIG
    _make(engine, clock, "a", "ok", payload)
    clock.advance(3600)
    store = engine.store
    real_mark = store._mark  # type: ignore[attr-defined]

    def mark_then_cite(*args: Any) -> set[str]:
        marked: set[str] = real_mark(*args)
        # In another thread, as another process would: B's step cites the blob now.
        t = threading.Thread(target=lambda: engine.run("job", "ok", payload, run_id="b"))
        t.start()
        t.join(30)
        assert not t.is_alive()
        return marked

    monkeypatch.setattr(store, "_mark", mark_then_cite)
    engine.prune(dt.timedelta(minutes=30))
    monkeypatch.undo()
    for rec in engine.history("b"):
        if rec.inputs:
            from durably import inputs

            assert inputs.load(rec.inputs, engine.blobs), rec.position
    assert engine.run("job", "ok", payload, run_id="b") == "done"


@pytest.mark.postgres
def test_a_citer_holding_the_blob_row_lock_makes_the_sweep_wait_and_keep_it(
    pg_url: str, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL, the other order: another transaction has cited the blob (put_blob on
    the stored row: its lock) and not committed when the sweep reaches it. The sweep
    waits for the lock, then sees the touch and keeps the blob."""
    import psycopg

    from durably.store.sqlfiles import load_queries

    payload = "the same long argument " + "a" * BIG
    with _engine(pg_url, clock) as engine:
        _make(engine, clock, "a", "ok", payload)
        (digest,) = {r[0] for r in dump(pg_url)["blobs"] if r[1] == durably.codec.dumps(payload)}
        engine.start("job", "ok", "other", run_id="b")  # a live run, nothing recorded
        clock.advance(3600)
        put_blob = load_queries("postgres")["put_blob"]
        citer = psycopg.connect(pg_url)
        locked, waited = threading.Event(), threading.Event()

        def cite() -> None:
            citer.execute(put_blob, {"digest": digest, "data": b"x", "size": 1, "now": 0.0})
            citer.execute(
                "INSERT INTO steps (run_id, generation, position, kind, name, input_digest,"
                " status, output, started_at, inputs) VALUES ('b', 0, '0', 'step', 'effect',"
                " %(d)s, 'ok', '1', 0, %(inputs)s)",
                {"d": "f" * 64, "inputs": f'{{"args":[{{"b":"{digest}"}}],"kwargs":{{}}}}'},
            )
            locked.set()
            waited.wait(0.5)  # the sweep is blocked on the row meanwhile
            citer.commit()

        real_mark = engine.store._mark  # type: ignore[attr-defined]
        thread = threading.Thread(target=cite)

        def mark_then_lock(*args: Any) -> set[str]:
            marked: set[str] = real_mark(*args)
            thread.start()
            assert locked.wait(10)
            return marked

        monkeypatch.setattr(engine.store, "_mark", mark_then_lock)
        report = engine.prune(dt.timedelta(minutes=30))
        waited.set()
        thread.join(10)
        citer.close()
        assert report.run_ids == ("a",)
        assert digest in {r[0] for r in dump(pg_url)["blobs"]}, "the sweep deleted a cited blob"


def test_background_retention_has_one_pruner_at_a_time(journal_url: str) -> None:
    from durably.engine.retention import RETAIN_INTERVAL_S

    clock = FakeClock()
    keep = dt.timedelta(hours=1)
    with (
        _engine(journal_url, clock) as plain,
        durably.Engine(journal_url, clock=clock, retain_finished=keep) as first,
        durably.Engine(journal_url, clock=clock, retain_finished=keep) as second,
    ):
        _make(plain, clock, "old", "ok", "x")
        _make(plain, clock, "parked", "park", "y")
        assert plain.apply_retention() is None  # no retain_finished: never prunes
        clock.advance(2 * 3600)
        _make(plain, clock, "recent", "ok", "z")
        report = first.apply_retention()
        assert report is not None and report.run_ids == ("old",)
        assert second.apply_retention() is None, "a second pruner ran while the lease was held"
        assert first.apply_retention() is None  # at most once per interval
        clock.advance(RETAIN_INTERVAL_S * 2 + 1)  # the first pruner's lease expired
        later = second.apply_retention()
        assert later is not None and later.runs == 0
        assert {r.run_id for r in plain.list_runs().runs} == {"parked", "recent"}


def test_retain_finished_refuses_what_is_not_a_positive_timedelta(journal_url: str) -> None:
    for bad in (30, dt.timedelta(0), "30d"):
        with pytest.raises(durably.ConfigError, match="retain_finished"):
            durably.Engine(journal_url, retain_finished=bad)  # type: ignore[arg-type]


def test_a_nan_cut_is_refused_not_read_as_everything(
    engine: durably.Engine, clock: FakeClock
) -> None:
    """NaN compares false in Python and binds as NULL in SQLite (nothing pruned), but
    PostgreSQL sorts NaN above every number: ``finished_at < 'NaN'`` held for every run,
    so ``engine.prune(float("nan"))`` pruned every finished run there, and
    ``prune_tombstones(float("nan"))`` dropped every tombstone (their ids free to run
    their effects again). A cut that is not a number is refused on every store."""
    _make(engine, clock, "done", "ok", "x")
    engine.delete_run("done")
    _make(engine, clock, "kept", "ok", "y")
    with pytest.raises(durably.ConfigError, match="finished_before"):
        engine.prune(float("nan"))
    with pytest.raises(durably.ConfigError, match="removed_before"):
        engine.prune_tombstones(float("nan"))
    assert engine.get_run("kept").status == "completed"
    assert [t.run_id for t in engine.list_tombstones()] == ["done"]


def test_a_fork_copying_citations_during_a_sweep_keeps_the_blobs(
    engine: durably.Engine, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fork copies records that cite blobs without storing them: when its copy commits
    between the mark and the sweep of its source run's prune, it touches the blobs."""
    from durably import inputs
    from durably.store.base import NewRun

    _make(engine, clock, "a", "ok", "a long argument " + "a" * BIG)
    source = engine.get_run("a")
    records = [r for r in engine.history("a") if r.status == "ok"]  # read before the prune
    clock.advance(3600)
    real_mark = engine.store._mark  # type: ignore[attr-defined]

    def mark_then_fork(*args: Any) -> set[str]:
        marked: set[str] = real_mark(*args)
        new = NewRun(
            "f",
            source.workflow,
            source.version,
            source.prompt_version,
            source.queue,
            source.input,
            source.input_digest,
            source.codec_version,
        )
        engine.store.fork_run(new, records)
        return marked

    monkeypatch.setattr(engine.store, "_mark", mark_then_fork)
    assert engine.prune(dt.timedelta(minutes=30)).run_ids == ("a",)
    monkeypatch.undo()
    loaded = [inputs.load(r.inputs, engine.blobs) for r in engine.history("f") if r.inputs]
    assert loaded, "the fork copied no inputs"
    assert engine.resume("f") == "done"


def test_blobs_a_crashed_prune_left_uncited_are_swept_by_the_next(
    engine: durably.Engine, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A prune that died after deleting a batch of runs, before sweeping their blobs,
    left those blobs cited by nothing and a candidate of no later sweep: disk never
    freed. The next prune (even one that removes no run) sweeps them."""
    _make(engine, clock, "gone", "ok", "u" * BIG)  # an unshared blob input
    store = engine.store

    def crash(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    real = store._sweep  # type: ignore[attr-defined]
    monkeypatch.setattr(store, "_sweep", crash)
    with pytest.raises(KeyboardInterrupt):
        engine.prune(0.0 + clock.time() + 1)
    monkeypatch.setattr(store, "_sweep", real)
    assert engine.list_tombstones()[0].run_id == "gone"
    blobs_before = len(dump(engine.url)["blobs"])
    assert blobs_before > 0
    dry = engine.prune(clock.time() + 1, dry_run=True)
    assert dry.runs == 0 and dry.blobs == blobs_before  # said truthfully, nothing changed
    assert len(dump(engine.url)["blobs"]) == blobs_before
    report = engine.prune(clock.time() + 1)
    assert report.runs == 0 and report.blobs == blobs_before
    assert dump(engine.url)["blobs"] == []


@pytest.mark.postgres
def test_a_forks_touches_lock_the_blobs_in_digest_order(pg_url: str) -> None:
    """Was: the fork's touch was one ``UPDATE ... WHERE digest = ANY(...)``, which locks
    rows in the order the plan meets them (a small table's sequential scan: the order
    they were stored), not the sorted order its caller passed, so it could lock B before
    A while a group-commit batch (blobs in digest order) held A and waited for B: a
    deadlock PostgreSQL kills. Forced here: a session holds A; the fork waits for A; B,
    stored first, must still be free."""
    import hashlib

    from durably.store.open import open_store

    from .test_store_contract import ME, alive, new_run, rec

    store: Any = open_store(pg_url, FakeClock())
    a = hashlib.sha256(b'"a"').hexdigest()
    b = hashlib.sha256(b'"b"').hexdigest()
    lo, hi = sorted((a, b))
    store.create_run(new_run("src"))
    token = store.claim("src", ME, 30, 10, alive).fencing_token
    # hi is stored before lo: a sequential scan meets it first.
    text = {a: '"a"', b: '"b"'}
    store.append("src", token, [rec("0").replace(blobs=((hi, text[hi]),))])
    store.append("src", token, [rec("1").replace(blobs=((lo, text[lo]),))])
    manifest = json.dumps({"args": [{"b": hi}, {"b": lo}], "kwargs": {}})
    records = [rec("0").replace(inputs=manifest)]
    got, errors = _free_while_waiting(
        pg_url, "blobs", "digest", lo, hi, "blobs",
        lambda: store.fork_run(new_run("forked"), records),
    )  # fmt: skip
    assert errors == []
    assert got == [(hi,)], "the fork locked the later digest while waiting for the earlier"
    assert [r.position for r in store.load_history("forked", 0)] == ["0"]
    store.close()


@pytest.mark.postgres
def test_a_prune_locks_its_runs_in_run_id_order(pg_url: str) -> None:
    """Was: the prune's ``SELECT ... WHERE run_id = ANY(...) FOR UPDATE`` locked run rows
    in the order its plan met them (storage order), so two prunes of overlapping runs
    (the background pruner beside `durably prune`) could take them in opposite orders: a
    deadlock PostgreSQL kills. Forced here: a session holds x1; the prune waits for x1;
    x2, stored first, must still be free."""

    clock = FakeClock()
    with _engine(pg_url, clock) as engine:
        for run_id in ("x2", "x1"):  # x2 stored first: a sequential scan meets it first
            _make(engine, clock, run_id, "ok", "p")
        clock.advance(3600)
        pruned: list[tuple[str, ...]] = []
        got, errors = _free_while_waiting(
            pg_url, "runs", "run_id", "x1", "x2", "FOR UPDATE",
            lambda: pruned.append(engine.prune(dt.timedelta(minutes=30)).run_ids),
        )  # fmt: skip
        assert errors == []
        assert got == [("x2",)], "the prune locked x2 while waiting for x1"
        assert sorted(pruned[0]) == ["x1", "x2"]


@pytest.mark.postgres
def test_the_sweep_drops_waiting_blobs_in_digest_order(pg_url: str) -> None:
    """The sibling of the two tests above in sweep_pending: ``DELETE ... = ANY`` locked
    rows in storage order, so two sweeps dropping overlapping digests could cross. Forced
    here: a session holds the earlier digest's row; the drop waits for it; the later,
    stored first, must still be free."""

    import psycopg

    from durably.store.open import open_store

    store: Any = open_store(pg_url, FakeClock())
    lo, hi = "a" * 64, "b" * 64
    with psycopg.connect(pg_url, autocommit=True) as setup:
        for d in (hi, lo):  # hi stored first: a sequential scan meets it first
            setup.execute("INSERT INTO sweep_pending (digest) VALUES (%s)", (d,))
    got, errors = _free_while_waiting(
        pg_url, "sweep_pending", "digest", lo, hi, "sweep_pending",
        lambda: store._writing(lambda tx: tx.q("drop_sweep_pending", digests=tx.array([lo, hi]))),
    )  # fmt: skip
    assert errors == []
    assert got == [(hi,)], "the drop locked the later digest while waiting for the earlier"
    with psycopg.connect(pg_url) as check:
        assert check.execute("SELECT count(*) FROM sweep_pending").fetchone() == (0,)
    store.close()


def _free_while_waiting(
    pg_url: str, table: str, column: str, held: str, other: str, waits_on: str, op: Any
) -> tuple[list[Any], list[BaseException]]:
    """Hold ``held``'s row of ``table`` in a session, run ``op`` in a thread until it
    waits for a lock (a statement like ``waits_on``), and say whether ``other``'s row is
    still free (its rows, locked with SKIP LOCKED: empty when ``op`` holds it); with
    the errors ``op`` raised once let go."""
    import time

    import psycopg

    errors: list[BaseException] = []

    def run() -> None:
        try:
            op()
        except BaseException as exc:  # a thread's error is the test's
            errors.append(exc)

    with psycopg.connect(pg_url) as holder:
        holder.execute(f"SELECT 1 FROM {table} WHERE {column} = %s FOR UPDATE", (held,))
        t = threading.Thread(target=run)
        t.start()
        with psycopg.connect(pg_url, autocommit=True) as probe:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                row = probe.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                    " AND datname = current_database() AND query LIKE %s",
                    (f"%{waits_on}%",),
                ).fetchone()
                if row and row[0] >= 1:
                    break
                time.sleep(0.02)
            with probe.transaction():
                got = probe.execute(
                    f"SELECT {column} FROM {table} WHERE {column} = %s FOR UPDATE SKIP LOCKED",
                    (other,),
                ).fetchall()
        holder.rollback()
    t.join(30)
    return got, errors
