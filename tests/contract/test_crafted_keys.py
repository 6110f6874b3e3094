"""Keys reach other systems, so what goes into them is checked at the boundary, on every
store: a run id with control characters is refused when the run is created, and a
hand-edited incarnation or position is refused when the row is read back, before any key
is built from it."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

import durably
from durably.errors import ConfigError, NotADurablyDatabase
from durably.history import StepRecord


def execute(url: str, sql: str, *params: Any) -> None:
    """Run one statement on the journal at ``url`` behind durably's back (a hand edit)."""
    if url.startswith("sqlite"):
        conn = sqlite3.connect(url[len("sqlite:///") :])
        with conn:
            conn.execute(sql, params)
        conn.close()
        return
    import psycopg

    with psycopg.connect(url, autocommit=True) as pg:
        pg.execute(sql.replace("?", "%s").encode(), params)


def keyed_workflow(engine: durably.Engine, sent: list[str]) -> Any:
    def send(*, idempotency_key: str) -> str:
        sent.append(idempotency_key)
        return "sent"

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> str:
        ctx.step("plan", lambda: "plan")
        return ctx.step("send", send)

    return w


@pytest.mark.parametrize("run_id", ["a\nb", "a\x00b", "tab\there", "bell\x07", "c1\x85", "\u202e"])
def test_a_run_id_with_control_characters_is_refused(store_url: str, run_id: str) -> None:
    """Every key starts with the run id; an Idempotency-Key header (and durably's own
    receiving side) refuses control characters, and PostgreSQL refuses NUL where SQLite
    stores it. Both stores refuse such an id up front, with the same error."""
    engine = durably.Engine(store_url)
    sent: list[str] = []
    w = keyed_workflow(engine, sent)
    try:
        with pytest.raises(ConfigError, match="control or other unprintable"):
            engine.run(w, run_id=run_id)
        with pytest.raises(ConfigError, match="control or other unprintable"):
            engine.start(w, run_id=run_id)
        engine.run(w, run_id="ok")
        with pytest.raises(ConfigError, match="control or other unprintable"):
            engine.fork("ok", at=1, new_run_id=run_id)
        assert [r.run_id for r in engine.store.list_runs()] == ["ok"]
        assert len(sent) == 1
        # Printable ids, colons and non-ASCII letters included, stay allowed.
        for fine in ("tenant:alert-42", "alerte-\u00e9", "a b"):
            engine.run(w, run_id=fine)
    finally:
        engine.close()


ARABIC_INDIC_DIGITS = "".join(chr(0x660 + i) for i in range(10))


@pytest.mark.parametrize(
    "incarnation",
    ["{inc}\n", "{inc}\r\nX-Evil: 1", "{upper}", "{inc}0", ARABIC_INDIC_DIGITS + "ab"],
)
def test_a_hand_edited_incarnation_is_refused_before_a_key_is_built(
    store_url: str, incarnation: str
) -> None:
    engine = durably.Engine(store_url)
    sent: list[str] = []
    w = keyed_workflow(engine, sent)
    try:
        engine.start(w, run_id="r")
        inc = engine.get_run("r").incarnation
        assert inc is not None
        # An incarnation drawn with no letter (about 1 run in 280) has no upper case: then
        # one letter is made upper case, so the case always checks what it says.
        upper = inc.upper() if inc.upper() != inc else inc[:-1] + "A"
        bad = incarnation.format(inc=inc, upper=upper)
        execute(store_url, "UPDATE runs SET incarnation = ? WHERE run_id = 'r'", bad)
        with pytest.raises(NotADurablyDatabase, match="bad incarnation"):
            engine.get_run("r")
        with pytest.raises(NotADurablyDatabase, match="bad incarnation"):
            engine.resume("r")
        assert sent == []  # no key was built from it, nothing was sent
    finally:
        engine.close()


@pytest.mark.parametrize("position", ["1\n", "\u00b2", "\u0663", "0.1.2\n", "1 "])
def test_a_hand_edited_position_is_refused_on_read(store_url: str, position: str) -> None:
    engine = durably.Engine(store_url)
    sent: list[str] = []
    w = keyed_workflow(engine, sent)
    try:
        engine.run(w, run_id="r")
        execute(store_url, "UPDATE steps SET position = ? WHERE position = '1'", position)
        with pytest.raises(NotADurablyDatabase, match="bad position"):
            engine.history("r")
    finally:
        engine.close()


@pytest.mark.parametrize("position", ["1\n", "\u00b2", "\u0663", "0.1.2\n", "4.1", "", "-1"])
def test_a_bad_position_is_refused_on_the_way_in(position: str) -> None:
    rec = StepRecord(position, "step", "s", "0" * 64, "ok", output="1")
    with pytest.raises(ValueError, match="bad position"):
        rec.check()
    assert StepRecord("4.1.0", "step", "s", "0" * 64, "ok", output="1").check()


def test_a_run_created_before_the_rule_may_still_be_driven(store_url: str) -> None:
    """A run whose id predates the rule (a tab in it) is not locked out: it resumes."""
    engine = durably.Engine(store_url)
    sent: list[str] = []
    w = keyed_workflow(engine, sent)
    try:
        engine.start(w, run_id="old-id")
        execute(store_url, "UPDATE runs SET run_id = ? WHERE run_id = 'old-id'", "old\tid")
        assert engine.run(w, run_id="old\tid") == "sent"
        assert sent == [engine.get_run("old\tid").key("1")]
    finally:
        engine.close()
