"""SQLite's tuned step append (issue 28): a step's record and its events in one written-out
transaction, the events in one statement. It must store exactly what the transaction path
stores (rows compared with the tuned path turned off), be the path a step takes (counted
statements, not time), and hand an event stored already to the transaction path, which
numbers the others without a gap."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

import durably
from durably.clock import FakeClock
from durably.events import new_event
from durably.history import INTENT, StepRecord
from durably.store.open import open_store
from durably.store.sqlite import SQLiteStore

from ..contract.test_store_contract import ME, alive, new_run, rec

_MANY_EVENTS_SQL = "INSERT INTO events (run_id, cursor, kind, position, data, at, dedupe) SELECT"


class Flaky(Exception):
    """A step's first attempt fails (a retry writes its own event)."""


def _workflow(engine: durably.Engine) -> Any:
    tries = {"n": 0}

    @durably.step(retries=1, backoff=0.0)
    def flaky() -> str:
        tries["n"] += 1
        if tries["n"] == 1:
            raise Flaky("first attempt")
        return "second"

    @durably.step(effect=True)
    def send(text: str, *, idempotency_key: str) -> str:
        return f"sent {text}"

    @engine.workflow(name="w")
    def w(ctx: durably.Context, n: int) -> list[Any]:
        out: list[Any] = [ctx.step("plain", lambda i: {"i": i, "half": i / 2}, k) for k in range(n)]
        ctx.emit("note", {"at": "middle"})  # rides with the next step's write
        out.append(ctx.step("flaky", flaky))
        out.append(ctx.step("send", send, "hello"))
        try:
            ctx.step("fails", lambda: 1 / 0)
        except durably.StepFailed:
            out.append("failed")
        return out

    return w


def _rows(path: Path, incarnation: str) -> dict[str, list[tuple[Any, ...]]]:
    conn = sqlite3.connect(path)
    try:
        tables = {
            "steps": conn.execute("SELECT * FROM steps ORDER BY generation, position").fetchall(),
            "events": conn.execute("SELECT * FROM events ORDER BY run_id, cursor").fetchall(),
            "runs": conn.execute("SELECT last_event, status, outcome FROM runs").fetchall(),
        }
    finally:
        conn.close()
    # The run's incarnation is drawn at random: it is in every key, so it is named here.
    return {
        t: [
            tuple(v.replace(incarnation, "INC") if isinstance(v, str) else v for v in r)
            for r in rows
        ]
        for t, rows in tables.items()
    }


def _run(path: Path, tuned: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, list[str]]:
    seen: list[str] = []
    with monkeypatch.context() as m:
        if not tuned:
            m.setattr(SQLiteStore, "_append_quick", lambda self, *a, **k: None)
        with durably.Engine(f"sqlite:///{path}", clock=FakeClock(1000.0)) as e:
            w = _workflow(e)
            e.store._conn.set_trace_callback(seen.append)  # type: ignore[attr-defined]
            assert e.run(w, 3, run_id="r") == [
                {"half": 0.0, "i": 0},
                {"half": 0.5, "i": 1},
                {"half": 1.0, "i": 2},
                "second",
                "sent hello",
                "failed",
            ]
            incarnation = e.store.get_run("r").incarnation
    assert incarnation is not None
    return _rows(path, incarnation), seen


def test_the_tuned_append_stores_what_the_transaction_path_stores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tuned, tuned_sql = _run(tmp_path / "tuned.db", True, monkeypatch)
    plain, plain_sql = _run(tmp_path / "plain.db", False, monkeypatch)
    assert tuned == plain
    kinds = [row[2] for row in tuned["events"]]
    assert kinds.count("step.completed") == 5 and "step.retried" in kinds and "user" in kinds
    # Counted, not timed: every write of one record with its events took the
    # one-statement insert (three plain steps, flaky's result after its retry's own
    # write, send's intent and its result, the failure), the other path never.
    assert sum(s.startswith(_MANY_EVENTS_SQL) for s in tuned_sql) == 7
    assert not any(s.startswith(_MANY_EVENTS_SQL) for s in plain_sql)


def test_an_event_stored_already_goes_to_the_transaction_path_without_a_gap(
    tmp_path: Path,
) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'j.db'}", FakeClock(1000.0))
    try:
        store.create_run(new_run("r"))
        token = store.claim("r", ME, 30, 10, alive).fencing_token
        before = store.read_events("r", 0, 10)
        assert before is not None  # the run's own (created, claimed, started)
        intent = StepRecord("0", "step", "s0", rec("0").digest, INTENT)
        started = new_event("step.started", "0", {"attempt": 1}, 1000.0, "t:0:started")
        assert store.append("r", token, [intent], [started]) is False
        # The result repeats step.started (stored already, so skipped) with its own event.
        done = new_event("step.completed", "0", {"attempt": 1}, 1001.0, "t:0:completed")
        assert store.append("r", token, [rec("0")], [started, done]) is False
        page = store.read_events("r", before.cursor, 10)
        assert page is not None
        assert [(ev.cursor - before.cursor, ev.kind) for ev in page.events] == [
            (1, "step.started"),
            (2, "step.completed"),
        ]
        [stored] = store.load_history("r", 0)
        assert (stored.status, stored.output) == ("ok", rec("0").output)
    finally:
        store.close()
