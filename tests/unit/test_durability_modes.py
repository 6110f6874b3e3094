"""Durability modes (DESIGN "Durability modes"): the knob, its refusals, and what each
mode makes each commit do on SQLite (the pragma in force) and PostgreSQL (the session's
synchronous_commit). What survives a SIGKILL in each mode: tests/crash/test_sigkill.py."""

from __future__ import annotations

from pathlib import Path

import pytest

import durably
from durably.store.durability import needs_sync
from durably.store.postgres import PostgresStore
from durably.store.sqlite import SQLiteStore

FULL, NORMAL = 2, 1  # PRAGMA synchronous values


def _trivial(i: int) -> int:
    return i


@durably.step(effect=True)
def _charge(i: int, *, idempotency_key: str) -> int:
    return i


def _engine(tmp_path: Path, **options: object) -> durably.Engine:
    return durably.Engine(f"sqlite:///{tmp_path / 'j.db'}", **options)  # type: ignore[arg-type]


def test_power_is_the_default_and_every_mode_is_taken(journal_url: str) -> None:
    with durably.Engine(journal_url) as engine:
        assert engine.durability == "power"
    for mode in ("power", "process", "effects"):
        with durably.Engine(journal_url, durability=mode) as engine:
            assert engine.durability == mode
            assert engine.store.durability == mode


def test_an_unknown_mode_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(durably.ConfigError, match="durability='fast': choose 'power'"):
        _engine(tmp_path, durability="fast")


@pytest.mark.parametrize(
    ("mode", "synchronous"),
    [("power", "NORMAL"), ("process", "FULL"), ("effects", "FULL"), ("process", "EXTRA")],
)
def test_a_synchronous_that_contradicts_the_mode_is_a_config_error(
    tmp_path: Path, mode: str, synchronous: str
) -> None:
    with pytest.raises(durably.ConfigError, match=f"contradicts durability='{mode}'"):
        _engine(tmp_path, durability=mode, synchronous=synchronous)


def test_synchronous_alone_keeps_the_mode_it_names(tmp_path: Path) -> None:
    with _engine(tmp_path, synchronous="normal") as engine:
        assert engine.durability == "process"
    with _engine(tmp_path, synchronous="EXTRA") as engine:
        assert engine.durability == "power"
    with _engine(tmp_path, durability="power", synchronous="EXTRA") as engine:
        assert engine.store._conn.execute("PRAGMA synchronous").fetchone()[0] == 3  # type: ignore[attr-defined]
    with pytest.raises(durably.ConfigError, match="synchronous='OFF'"):
        _engine(tmp_path, synchronous="OFF")


@pytest.mark.parametrize(("mode", "level"), [("power", FULL), ("process", NORMAL)])
def test_sqlite_power_and_process_commit_at_their_level(
    tmp_path: Path, mode: str, level: int
) -> None:
    with _engine(tmp_path, durability=mode) as engine:
        store = engine.store
        assert isinstance(store, SQLiteStore)
        assert store._conn.execute("PRAGMA synchronous").fetchone()[0] == level


def test_sqlite_effects_mode_fsyncs_intents_parks_and_ends_only(tmp_path: Path) -> None:
    """Pure steps commit at NORMAL; the intent of an effect, and the run's end, at FULL
    (a FULL commit fsyncs the WAL, which carries the pure commits before it)."""
    engine = _engine(tmp_path, durability="effects")
    store = engine.store
    assert isinstance(store, SQLiteStore)
    trace: list[str] = []
    store._conn.set_trace_callback(lambda s: trace.append(" ".join(s.split())[:60]))

    @engine.workflow(name="mixed")
    def mixed(ctx: durably.Context) -> int:
        a = ctx.step("a", _trivial, 1)
        b = ctx.step("b", _trivial, 2)
        c = ctx.step("charge", _charge, a + b)
        return ctx.step("d", _trivial, c)

    assert engine.run(mixed, run_id="m") == 3
    level, at_commit = "FULL", []
    for s in trace:
        if s.startswith("PRAGMA synchronous = "):
            level = s.rsplit(" ", 1)[1]
        elif s.startswith("INSERT INTO steps"):
            at_commit.append(("step", level))
        elif s.startswith("UPDATE runs SET status = 'completed'"):
            at_commit.append(("end", level))
    # a, b at NORMAL; the intent at FULL; the effect's result and d ride along; the end FULL.
    assert at_commit == [
        ("step", "NORMAL"),
        ("step", "NORMAL"),
        ("step", "FULL"),
        ("step", "NORMAL"),
        ("step", "NORMAL"),
        ("end", "FULL"),
    ]
    engine.close()


def test_needs_sync_per_mode() -> None:
    pure = durably.StepRecord("0", "step", "a", "0" * 64, "ok", output="1")
    intent = durably.StepRecord("1", "step", "b", "0" * 64, "intent")
    assert needs_sync("power", [pure]) and needs_sync("power", [])
    assert not needs_sync("process", [intent])
    assert not needs_sync("effects", [pure]) and needs_sync("effects", [pure, intent])


def _session_setting(store: PostgresStore) -> list[str]:
    """synchronous_commit of every idle pooled connection."""
    seen = []
    conns = [store._pool.getconn() for _ in range(store._pool.get_stats()["pool_size"])]
    for conn in conns:
        seen.append(conn.execute("SHOW synchronous_commit").fetchone()[0])  # type: ignore[index]
    for conn in conns:
        store._pool.putconn(conn)
    return seen


def test_postgres_modes_set_synchronous_commit(pg_url: str) -> None:
    with durably.Engine(pg_url, durability="process", pool_min=1, pool_max=1) as engine:
        store = engine.store
        assert isinstance(store, PostgresStore)
        engine.workflow(name="w")(lambda ctx: ctx.step("a", _trivial, 1))
        engine.run("w", run_id="p")
        assert _session_setting(store) == ["off"]
    with durably.Engine(pg_url, durability="effects", pool_min=1, pool_max=1) as engine:
        store = engine.store
        assert isinstance(store, PostgresStore)
        default = _session_setting(store)[0]
        assert default != "off"

        @durably.step(effect=True)
        def charge(*, idempotency_key: str) -> list[str]:
            return _session_setting(store)  # the intent's commit, just made

        @engine.workflow(name="e")
        def effects(ctx: durably.Context) -> list[str]:
            ctx.step("a", _trivial, 1)
            assert _session_setting(store) == ["off"]  # the pure step's commit: async
            return ctx.step("charge", charge)

        assert engine.run(effects, run_id="e") == [default]  # the intent: synchronous
        assert _session_setting(store) == [default]  # the end: synchronous
