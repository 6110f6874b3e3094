"""Values that cannot be encoded or decoded end a run ``blocked``, never ``failed``
(issue 8 §1, issue 9 §3 "Values that crash decoding" and "Limits"), and the small counts
users read: attempts across a crash, spend of retried attempts (issue 9 §4).

Every test runs on a real SQLite file; crafted rows are written with sqlite3 directly.
"""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path
from typing import Any

import pydantic
import pytest

import durably
from durably import codec
from durably.history import NAME_BYTES_MAX, RUN_INPUT_BYTES_MAX, STEP_OUTPUT_BYTES_MAX


class Reply(pydantic.BaseModel):
    """A model whose dump has a key the codec would take for a tag."""

    meta: dict[str, str]


class Crash(BaseException):
    """An injected crash: the engine gives the run back untouched."""


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "journal.db"


@pytest.fixture
def engine(path: Path) -> Any:
    with durably.Engine(f"sqlite:///{path}") as e:
        yield e


def status(engine: durably.Engine, run_id: str) -> str:
    return engine.get_run(run_id).status


def write_row(path: Path, sql: str, *params: Any) -> None:
    conn = sqlite3.connect(path)
    with conn:
        assert conn.execute(sql, params).rowcount == 1
    conn.close()


# -- encoding ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value", [10**5000, "cut model stream \ud83d"], ids=["huge int", "surrogate"]
)
def test_an_effect_output_that_cannot_be_encoded_blocks_the_run(
    engine: durably.Engine, value: Any
) -> None:
    calls: list[str] = []

    @durably.step(effect=True)
    def charge(idempotency_key: str) -> Any:
        calls.append(idempotency_key)
        return value

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> Any:
        try:
            return ctx.step("charge", charge)
        except Exception:  # the workflow cannot swallow it: the run is poisoned
            return "swallowed"

    with pytest.raises(durably.SerializationError, match="charge"):
        engine.run(w, run_id="r")
    assert status(engine, "r") == "blocked"
    assert len(calls) == 1
    assert "blocked" in (engine.get_run("r").park_reason or "")


def test_a_deeply_nested_output_blocks_the_run(engine: durably.Engine) -> None:
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> Any:
        return ctx.step("nest", lambda: deep)

    with pytest.raises(durably.SerializationError):
        engine.run(w, run_id="r")
    assert status(engine, "r") == "blocked"


def test_a_workflow_result_that_cannot_be_encoded_blocks_the_run(engine: durably.Engine) -> None:
    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> Any:
        ctx.step("a", lambda: 1)
        return object()

    with pytest.raises(durably.SerializationError, match="result"):
        engine.run(w, run_id="r")
    assert status(engine, "r") == "blocked"


def test_pydantic_dump_keys_that_look_like_tags_round_trip(engine: durably.Engine) -> None:
    reply = Reply(meta={"$tuple": "ab"})
    assert codec.roundtrip(reply, Reply) == reply

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> dict[str, str]:
        def model() -> Reply:
            return reply

        return ctx.step("model", model).meta

    assert engine.run(w, run_id="r") == {"$tuple": "ab"}


def test_a_failure_message_with_a_lone_surrogate_is_recorded(engine: durably.Engine) -> None:
    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> None:
        def tool() -> None:
            raise RuntimeError("model said \ud83d")

        ctx.step("tool", tool)

    with pytest.raises(durably.WorkflowFailed):
        engine.run(w, run_id="r")
    run = engine.get_run("r")
    assert run.status == "failed" and "\\ud83d" in (run.error_message or "")
    [step] = engine.history("r")
    assert step.status == "failed" and "\\ud83d" in (step.error_message or "")


# -- decoding crafted rows -----------------------------------------------------------------


CRAFTED_OUTPUTS = {
    "int digits": "1" * 5000,  # ValueError: beyond the int max-str-digits limit
    "deep nesting": "[" * 100_000 + "]" * 100_000,  # RecursionError
    "huge timedelta": '{"$timedelta": 100000000000000000000000}',  # OverflowError
    "bad datetime": '{"$datetime": "not a date"}',
    "bad map": '{"$map": 5}',
}


@pytest.mark.parametrize("crafted", list(CRAFTED_OUTPUTS))
def test_a_crafted_step_output_blocks_the_run(
    path: Path, engine: durably.Engine, crafted: str
) -> None:
    after: list[str] = []

    def crash_at_b(run_id: str, pos: str, name: str, window: str) -> None:
        if name == "b" and crash_at_b.armed:  # type: ignore[attr-defined]
            raise Crash()

    crash_at_b.armed = True  # type: ignore[attr-defined]
    engine.fault_hook = crash_at_b

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> Any:
        a = ctx.step("a", lambda: 1)
        try:
            ctx.step("b", lambda: after.append("b"))
        except Exception:
            pass
        return a

    with pytest.raises(Crash):
        engine.run(w, run_id="r")
    write_row(path, "UPDATE steps SET output = ? WHERE position = '0'", CRAFTED_OUTPUTS[crafted])
    crash_at_b.armed = False  # type: ignore[attr-defined]
    with pytest.raises(durably.SerializationError):
        engine.run(w, run_id="r")
    assert status(engine, "r") == "blocked"
    assert after == []  # nothing after the bad row ran


CRAFTED_INPUTS = {
    "deep nesting": '{"args": [' + "[" * 100_000 + "]" * 100_000 + '], "kwargs": {}}',
    "huge timedelta": '{"args": [{"$timedelta": 100000000000000000000000}], "kwargs": {}}',
    "int digits": '{"args": [' + "7" * 5000 + '], "kwargs": {}}',
    "not an object": "[1, 2]",
    "bad kwargs": '{"args": [], "kwargs": [1]}',
}


@pytest.mark.parametrize("crafted", list(CRAFTED_INPUTS))
def test_a_crafted_run_input_blocks_the_run_and_stops_the_heartbeat(
    path: Path, engine: durably.Engine, crafted: str
) -> None:
    @engine.workflow(name="w")
    def w(ctx: durably.Context, x: Any = None) -> Any:
        return x

    engine.start(w, 1, run_id="r")
    text = CRAFTED_INPUTS[crafted]
    # With its sha256, so the decoding itself is what refuses it (a changed input with
    # its old digest is refused before: tests/unit/test_blob_integrity.py).
    digest = hashlib.sha256(text.encode()).hexdigest()
    write_row(path, "UPDATE runs SET input = ?, input_digest = ? WHERE run_id = 'r'", text, digest)
    with pytest.raises(durably.SerializationError, match="recorded input cannot be decoded"):
        engine.resume("r")
    run = engine.get_run("r")
    assert run.status == "blocked" and run.owner is None and run.lease_expires_at is None
    assert engine._leases.keeper._cores == {}  # no heartbeat renews a lease nobody uses


def test_a_start_that_fails_reading_history_releases_the_lease(
    path: Path, engine: durably.Engine
) -> None:
    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> Any:
        ctx.step("a", lambda: 1)
        raise Crash()

    with pytest.raises(Crash):
        engine.run(w, run_id="r")
    write_row(path, "UPDATE steps SET status = 'bogus' WHERE position = '0'")
    with pytest.raises(durably.DurablyError):
        engine.run(w, run_id="r")
    run = engine.get_run("r")
    assert run.owner is None and run.lease_expires_at is None
    assert engine._leases.keeper._cores == {}


# -- limits ----------------------------------------------------------------------------------


def test_a_step_name_above_the_limit_is_a_config_error(engine: durably.Engine) -> None:
    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> Any:
        return ctx.step("n" * (NAME_BYTES_MAX + 1), lambda: 1)

    with pytest.raises(durably.ConfigError, match="NAME_BYTES_MAX"):
        engine.run(w, run_id="r")
    assert status(engine, "r") == "blocked"
    assert engine.history("r") == []
    with pytest.raises(durably.ConfigError, match="NAME_BYTES_MAX"):
        engine.workflow(name="é" * NAME_BYTES_MAX)(lambda ctx: None)


def test_a_step_output_above_the_limit_blocks_the_run(engine: durably.Engine) -> None:
    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> Any:
        return len(ctx.step("big", lambda: "x" * STEP_OUTPUT_BYTES_MAX))

    with pytest.raises(durably.SerializationError, match="more than the"):
        engine.run(w, run_id="r")
    assert status(engine, "r") == "blocked"
    assert engine.history("r") == []


def test_a_run_input_above_the_limit_is_refused_before_the_run_exists(
    engine: durably.Engine,
) -> None:
    @engine.workflow(name="w")
    def w(ctx: durably.Context, doc: str) -> int:
        return len(doc)

    with pytest.raises(durably.SerializationError, match="workflow input"):
        engine.run(w, "x" * RUN_INPUT_BYTES_MAX, run_id="r")
    with pytest.raises(durably.RunNotFound):
        engine.get_run("r")


def test_a_workflow_result_above_the_limit_blocks_the_run(engine: durably.Engine) -> None:
    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> str:
        return "x" * (STEP_OUTPUT_BYTES_MAX + 1)

    with pytest.raises(durably.SerializationError, match="more than the"):
        engine.run(w, run_id="r")
    assert status(engine, "r") == "blocked"


# -- attempts and spend ----------------------------------------------------------------------


def test_an_effect_re_executed_after_a_crash_counts_its_attempts(
    engine: durably.Engine,
) -> None:
    sent: list[str] = []
    crashes = [2]

    def crash_after_effect(run_id: str, pos: str, name: str, window: str) -> None:
        if window == "effect" and crashes[0] > 0:
            crashes[0] -= 1
            raise Crash()

    engine.fault_hook = crash_after_effect

    @durably.step(effect=True)
    def send(idempotency_key: str) -> str:
        sent.append(idempotency_key)
        return "sent"

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> str:
        return str(ctx.step("send", send))

    for _ in range(2):
        with pytest.raises(Crash):
            engine.run(w, run_id="r")
    [intent] = engine.history("r")
    assert intent.status == "intent" and intent.attempts == 2
    assert engine.run(w, run_id="r") == "sent"
    [rec] = engine.history("r")
    assert len(sent) == 3 and rec.attempts == 3


def test_spend_of_failed_attempts_is_recorded(engine: durably.Engine) -> None:
    tries: list[int] = []

    @durably.step(retries=3, backoff=0.0)
    def model() -> str:
        tries.append(1)
        durably.usage(tokens=100, cost_usd=0.5)
        if len(tries) < 3:
            raise ConnectionError("flaky")
        return "ok"

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> str:
        return str(ctx.step("model", model))

    assert engine.run(w, run_id="r") == "ok"
    [rec] = engine.history("r")
    assert rec.attempts == 3 and rec.usage_tokens == 300 and rec.usage_cost_usd == 1.5


def test_spend_of_attempts_of_a_failed_step_is_recorded(engine: durably.Engine) -> None:
    @durably.step(retries=1, backoff=0.0)
    def model() -> str:
        durably.usage(tokens=10)
        raise ConnectionError("down")

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> str:
        return str(ctx.step("model", model))

    with pytest.raises(durably.WorkflowFailed):
        engine.run(w, run_id="r")
    [rec] = engine.history("r")
    assert rec.attempts == 2 and rec.usage_tokens == 20


@pytest.mark.parametrize(
    "arg", ["deep", "huge int", "surrogate"], ids=["deep", "huge int", "surrogate"]
)
def test_step_arguments_that_cannot_be_encoded_block_the_run(
    engine: durably.Engine, arg: str
) -> None:
    value: Any = {"huge int": 10**5000, "surrogate": "cut \ud83d"}.get(arg)
    if arg == "deep":
        value = []
        for _ in range(100_000):
            value = [value]
    ran: list[int] = []

    @engine.workflow(name="w")
    def w(ctx: durably.Context) -> Any:
        try:
            ctx.step("use", lambda v: ran.append(1), value)
        except Exception:
            pass
        return "swallowed"

    with pytest.raises(durably.SerializationError, match="use"):
        engine.run(w, run_id="r")
    assert status(engine, "r") == "blocked" and ran == []


# -- text a journal cannot store ---------------------------------------------------------


@pytest.fixture(params=["sqlite", "postgres"])
def any_engine(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """An engine on a real SQLite file or the real PostgreSQL server (whose text columns
    refuse NUL, where SQLite stores it)."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'journal.db'}"
    else:
        url = request.getfixturevalue("pg_url")
    with durably.Engine(url) as e:
        yield e


class BrokenStr(Exception):
    """An exception whose message cannot even be produced."""

    def __str__(self) -> str:
        raise RuntimeError("no message")


def _nul_error() -> None:
    raise ValueError("tool output\x00with a NUL")


@pytest.mark.parametrize(
    ("raise_", "expected"),
    [
        (_nul_error, "tool output\\x00with a NUL"),
        (lambda: (_ for _ in ()).throw(BrokenStr()), "<str() of the error raised RuntimeError>"),
    ],
    ids=["NUL in message", "broken __str__"],
)
@pytest.mark.parametrize("where", ["step", "workflow"])
def test_a_failure_with_an_unstorable_message_is_recorded_as_the_failure(
    any_engine: durably.Engine, raise_: Any, expected: str, where: str
) -> None:
    @any_engine.workflow(name="w")
    def w(ctx: durably.Context) -> Any:
        if where == "step":
            return ctx.step("a", raise_)
        return raise_()

    with pytest.raises(durably.WorkflowFailed) as err:
        any_engine.run(w, run_id="r")
    assert expected in str(err.value)
    run = any_engine.get_run("r")
    # The workflow's own failure, recorded: not a StoreError, not a run left running.
    assert run.status == "failed" and run.owner is None
    assert run.error_message is not None and expected in run.error_message
    assert "StoreError" not in (run.error_type or "")


def test_an_exception_class_with_an_unstorable_name_is_recorded(
    any_engine: durably.Engine,
) -> None:
    Odd = type("Odd", (Exception,), {})
    Odd.__qualname__ = "Odd\ud800\x00"  # type() itself refuses such a name

    @any_engine.workflow(name="w")
    def w(ctx: durably.Context) -> Any:
        raise Odd("x")

    with pytest.raises(durably.WorkflowFailed):
        any_engine.run(w, run_id="r")
    run = any_engine.get_run("r")
    assert run.status == "failed" and run.error_type is not None
    assert "Odd\\ud800\\x00" in run.error_type


@pytest.mark.parametrize("text", ["a\x00b", "cut \ud83d"], ids=["NUL", "surrogate"])
def test_names_and_ids_a_journal_cannot_store_are_config_errors(
    any_engine: durably.Engine, text: str
) -> None:
    with pytest.raises(durably.ConfigError, match="cannot store"):
        any_engine.workflow(name=text)(lambda ctx: 1)

    @any_engine.workflow(name="w")
    def w(ctx: durably.Context) -> Any:
        return ctx.step(text, lambda: 1)

    with pytest.raises(durably.ConfigError, match="unprintable"):
        any_engine.run(w, run_id=text)
    with pytest.raises(durably.ConfigError, match="cannot store"):
        any_engine.start(w, run_id="q", queue=text)
    # A step name is the program's: the run is blocked (fix the code), never failed.
    with pytest.raises(durably.ConfigError, match="cannot store"):
        any_engine.run(w, run_id="r")
    assert status(any_engine, "r") == "blocked"
