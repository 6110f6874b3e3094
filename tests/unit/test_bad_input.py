"""Every entry point meets bad input with a clear error and loses nothing recorded."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import durably
from durably.errors import ConfigError


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'j.db'}"


@pytest.fixture
def engine(db: str) -> Iterator[durably.Engine]:
    e = durably.Engine(db)
    yield e
    e.close()


def _register(engine: durably.Engine) -> durably.Workflow:
    @engine.workflow(name="wf")
    def wf(ctx: durably.Context, x: int) -> int:
        return ctx.step("double", lambda v: v * 2, x)

    return wf


def test_run_id_reused_with_another_workflow(engine: durably.Engine) -> None:
    wf = _register(engine)

    @engine.workflow(name="other")
    def other(ctx: durably.Context, x: int) -> int:
        return x

    assert engine.run(wf, 2, run_id="r") == 4
    with pytest.raises(durably.RunConflict, match="belongs to workflow 'wf'"):
        engine.run(other, 2, run_id="r")
    assert engine.run(wf, 2, run_id="r") == 4  # still intact


def test_run_id_reused_with_other_input(engine: durably.Engine) -> None:
    wf = _register(engine)
    engine.run(wf, 2, run_id="r")
    with pytest.raises(durably.RunConflict, match="other input"):
        engine.run(wf, 3, run_id="r")
    assert engine.resume("r") == 4


def test_step_name_must_be_a_string(engine: durably.Engine) -> None:
    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> None:
        ctx.step(42, lambda: 1)  # type: ignore[arg-type]

    with pytest.raises(ConfigError, match="step name must be a non-empty str"):
        engine.run(wf, run_id="r")
    assert engine.get_run("r").status == "blocked"


def test_unregistered_workflow(engine: durably.Engine) -> None:
    def plain(ctx: durably.Context) -> None:
        pass

    with pytest.raises(durably.WorkflowNotRegistered, match=r"@engine\.workflow"):
        engine.run(plain)  # type: ignore[arg-type]
    with pytest.raises(durably.RunNotFound):
        engine.resume("nope")


def test_bad_urls() -> None:
    with pytest.raises(ConfigError, match="sqlite:///"):
        durably.Engine("mysql://x")
    with pytest.raises(ConfigError, match="sqlite:///"):
        durably.Engine("sqlite://relative.db")


def test_a_database_that_is_not_durablys(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE users (id INTEGER)")
        conn.execute("INSERT INTO users VALUES (1)")
    with pytest.raises(durably.NotADurablyDatabase, match="not a durably journal"):
        durably.Engine(f"sqlite:///{path}")
    with sqlite3.connect(path) as conn:  # untouched
        assert conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 1


def test_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_bytes(b"these are my notes, not a database" * 100)
    with pytest.raises(durably.NotADurablyDatabase, match="not a SQLite database or is corrupt"):
        durably.Engine(f"sqlite:///{path}")
    assert path.read_bytes().startswith(b"these are my notes")


def test_a_database_locked_past_the_busy_timeout(db: str, tmp_path: Path) -> None:
    engine = durably.Engine(db, busy_timeout_s=0.2)
    wf = _register(engine)
    assert engine.run(wf, 1, run_id="before") == 2
    blocker = sqlite3.connect(tmp_path / "j.db", isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(durably.StoreBusy, match="locked by another process"):
            engine.run(wf, 5, run_id="during")
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert engine.run(wf, 1, run_id="before") == 2  # nothing recorded was lost
    assert engine.run(wf, 5, run_id="during") == 10
    engine.close()


def test_bad_options() -> None:
    with pytest.raises(ConfigError):
        durably.step(retries=-1)
    with pytest.raises(ConfigError):
        durably.step(timeout_s=0)
    with pytest.raises(ConfigError):
        durably.Engine("sqlite:///:memory:", lease_s=0)
    with pytest.raises(ConfigError, match="synchronous"):
        durably.Engine("sqlite:///:memory:", synchronous="OFF")


def test_quarantine_after_max_starts_without_progress(db: str) -> None:
    engine = durably.Engine(db, max_starts=3)

    class Crash(BaseException):
        pass

    def dies() -> None:
        raise Crash("the process dies here every time")

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> None:
        ctx.step("ok", lambda: 1)
        ctx.step("dies", dies)

    # Start 1 records "ok" then dies; starts 2-4 die without recording anything.
    for _ in range(4):
        with pytest.raises(Crash):
            engine.run(w, run_id="loop")
    with pytest.raises(durably.RunQuarantined, match="quarantined"):
        engine.run(w, run_id="loop")
    with pytest.raises(durably.RunQuarantined):
        engine.run(w, run_id="loop")
    run = engine.get_run("loop")
    assert run.status == "quarantined" and run.starts == 4
    assert [s.name for s in engine.history("loop")] == ["ok"]  # nothing lost
    engine.close()


def test_a_second_driver_in_the_same_process_follows_the_first(engine: durably.Engine) -> None:
    inside = threading.Event()
    release = threading.Event()
    calls: list[int] = []

    def slow() -> str:
        calls.append(1)
        inside.set()
        release.wait(10)
        return "done"

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> str:
        return ctx.step("slow", slow)

    results: list[object] = []
    t = threading.Thread(target=lambda: results.append(engine.run(w, run_id="r")))
    t.start()
    assert inside.wait(10)
    # Never two drivers of one run: with wait_for_lease off the second is refused ...
    engine.wait_for_lease = False
    with pytest.raises(durably.RunLeased, match="two processes may never drive one run"):
        engine.run(w, run_id="r")
    # ... and by default it follows the first to its outcome, running nothing itself.
    engine.wait_for_lease = True
    threading.Timer(0.2, release.set).start()
    assert engine.run(w, run_id="r") == "done"
    t.join(10)
    assert results == ["done"] and calls == [1]


def test_a_run_finished_elsewhere_since_we_looked_returns_its_outcome(
    engine: durably.Engine,
) -> None:
    calls: list[int] = []

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> str:
        calls.append(1)
        return "first"

    stale = engine._create.prepare(w, (), {}, "r")  # what a second caller read before the end
    assert engine.run(w, run_id="r") == "first"
    assert engine._driver.drive_sync(w, stale) == "first"  # not run again, not reopened
    assert calls == [1] and engine.get_run("r").status == "completed"


def test_a_hand_edited_run_row_is_named_with_what_to_do(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from durably.cli import main as cli

    url = f"sqlite:///{tmp_path / 'j.db'}"
    engine = durably.Engine(url)

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> int:
        return 1

    engine.run(w, run_id="ok")
    engine.run(w, run_id="edited")
    engine.close()
    with sqlite3.connect(tmp_path / "j.db") as conn:
        conn.execute("UPDATE runs SET status = 'bogus' WHERE run_id = 'edited'")
    res = CliRunner().invoke(cli, ["runs", "list", "--db", url])
    assert res.exit_code == 1
    assert "run 'edited': unknown status 'bogus'" in res.output, res.output
    assert "restore that row" in res.output and "Traceback" not in res.output
    with sqlite3.connect(tmp_path / "j.db") as conn:  # the read changed nothing
        assert conn.execute("SELECT status FROM runs WHERE run_id = 'edited'").fetchone() == (
            "bogus",
        )
