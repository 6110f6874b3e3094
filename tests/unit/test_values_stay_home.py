"""Values stay home: a replay mismatch names the argument, message and field, with lengths
and short hashes, and never copies a value into anything that leaves the process.

Once, the NonDeterminism message carried a diff of the old and new argument values: an
Authorization header's API key reached the ``run.blocked`` event, ``runs tail``, the
OpenTelemetry span status, the exception text and ``durably replay --check`` output in
CI. Only ``durably runs why RUN --show-values``, run on the journal's host, shows them.
"""

from __future__ import annotations

import enum
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pydantic
import pytest
from click.testing import CliRunner

import durably
from durably.cli import main as cli

try:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
except ImportError:
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        raise  # CI installs the otel extra (make test): this test must run there
    pytest.skip(
        "OpenTelemetry is not installed: pip install -e '.[otel]' (make test does)",
        allow_module_level=True,
    )

from durably.otel import export_run


class Req(pydantic.BaseModel):
    """A model an API's reply is decoded into (return and parameter annotations)."""

    token: int


class Plan(enum.Enum):
    """An enum a step returns."""

    FREE = "free"


OLD = "sk-live-PLANTED-123"
NEW = "sk-live-PLANTED-456"
SECRETS = ("PLANTED", OLD, NEW)

APP = """
import os
import durably

engine = durably.Engine()
KEY = os.environ["APP_KEY"]


def call_api(url: str, headers: dict, messages: list) -> str:
    raise SystemExit("replay --check called a tool")


@engine.workflow(name="agent")
def agent(ctx: durably.Context) -> str:
    ctx.step("call", call_api, "https://api.example", {"Authorization": "Bearer " + KEY,
             "Accept": "application/json"}, [{"role": "system", "content": "sys " + KEY}])
    ctx.wait_for_signal("go")
    return "done"
"""


def _register(engine: durably.Engine, key: str) -> None:
    def call_api(url: str, headers: dict[str, str], messages: list[Any]) -> str:
        return "ok"

    @engine.workflow(name="agent")
    def agent(ctx: durably.Context) -> str:
        headers = {"Authorization": "Bearer " + key, "Accept": "application/json"}
        ctx.step(
            "call",
            call_api,
            "https://api.example",
            headers,
            [{"role": "system", "content": "sys " + key}],
        )
        ctx.wait_for_signal("go")
        return "done"


def _clean(where: str, text: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"{where} shows {secret!r}:\n{text}"


def _replay_check(tmp_path: Path, url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "durably.cli", "replay", "--check", "app:engine", *extra],
        env={**os.environ, "DURABLY_URL": url, "PYTHONPATH": str(tmp_path), "APP_KEY": NEW},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_changed_secret_argument_appears_in_no_event_span_exception_or_ci_output(
    tmp_path: Path,
) -> None:
    (tmp_path / "app.py").write_text(APP)
    db = tmp_path / "j.db"
    url = f"sqlite:///{db}"
    with durably.Engine(url, park_wait_s=0) as engine:
        _register(engine, OLD)
        with pytest.raises(durably.RunParked):
            engine.run("agent", run_id="r1")

    # CI: `durably replay --check` against the deploy that changed the key
    for extra in ((), ("--json",)):
        check = _replay_check(tmp_path, url, *extra)
        assert check.returncode == 1, check.stderr
        _clean(f"replay --check {' '.join(extra)}", check.stdout + check.stderr)
        assert "argument 'headers' (1)" in check.stdout
    report = json.loads(_replay_check(tmp_path, url, "--json").stdout)
    assert "field 'Authorization' differs: " in report["diverging"][0]["reason"]

    # The deploy reaches the run: it blocks
    with durably.Engine(url, park_wait_s=0) as engine:
        _register(engine, NEW)
        engine.signal("r1", "go")
        with pytest.raises(durably.NonDeterminism) as err:
            engine.run("agent", run_id="r1")
        assert engine.get_run("r1").status == "blocked"
        text = str(err.value)
        assert (
            "argument 'headers' (1) differs: field 'Authorization' differs: 26 -> 26 chars" in text
        )
        assert "sha256 " in text
        _clean("the exception", f"{text}\n{err.value!r}\n{err.getrepr()}")
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        export_run(engine, "r1", tracer_provider=provider)
        provider.shutdown()
    spans = exporter.get_finished_spans()
    assert any(s.status.description and "differs" in s.status.description for s in spans)
    _clean("the spans", "\n".join(s.to_json() for s in spans))

    with sqlite3.connect(db) as conn:
        events = conn.execute("SELECT * FROM events").fetchall()
        (reason,) = conn.execute("SELECT park_reason FROM runs WHERE run_id = 'r1'").fetchone()
    assert any("run.blocked" in map(str, row) for row in events)
    _clean("the events table", repr(events))
    _clean("the run's reason", reason)

    runner = CliRunner(env={"COLUMNS": "300"})
    for args in (
        ("runs", "tail", "r1"),
        ("runs", "tail", "r1", "--json"),
        ("runs", "why", "r1"),
        ("runs", "why", "r1", "--json"),
        ("runs", "show", "r1"),
    ):
        out = runner.invoke(cli, [*args, "--db", url])
        assert out.exit_code == 0, out.output
        _clean(" ".join(args), out.output)

    # On the journal's host, asked for: the recorded values, with real line breaks
    shown = runner.invoke(cli, ["runs", "why", "r1", "--show-values", "--db", url])
    assert shown.exit_code == 0, shown.output
    assert f'"Authorization": "Bearer {OLD}"' in shown.output
    values = shown.output.split("\n", 1)[1]  # below the why sentence
    assert '\n    "Accept": "application/json",\n' in values and "\\n" not in values
    assert NEW not in shown.output  # the code's side was never in the journal
    assert "not in the journal" in shown.output


def test_a_value_that_fails_to_decode_is_named_by_field_never_quoted(tmp_path: Path) -> None:
    # pydantic's ValidationError text quotes input_value=..., an enum's "'x' is not a
    # valid Color" quotes the value: both reached a blocked run's reason and its event.
    db = tmp_path / "j.db"
    with durably.Engine(f"sqlite:///{db}", park_wait_s=0) as engine:

        def fetch() -> Req:
            return {"token": OLD}  # type: ignore[return-value]  # what an API returned

        def plan() -> Plan:
            return OLD  # type: ignore[return-value]

        @engine.workflow(name="out")
        def out(ctx: durably.Context) -> int:
            return ctx.step("fetch", fetch).token

        @engine.workflow(name="enum")
        def enum_wf(ctx: durably.Context) -> str:
            return ctx.step("plan", plan).value

        @engine.workflow(name="inp")
        def inp(ctx: durably.Context, req: Req) -> int:
            return req.token

        runs = [(out, (), "out"), (enum_wf, (), "enum"), (inp, ({"token": OLD},), "inp")]
        for wf, args, run_id in runs:
            with pytest.raises(durably.SerializationError) as err:
                engine.run(wf, *args, run_id=run_id)
            _clean(f"{run_id}: the exception", str(err.value))
            run = engine.get_run(run_id)
            assert run.status == "blocked"
            _clean(f"{run_id}: the reason", run.park_reason or "")
        assert "ValidationError: 1 error(s): token: int_parsing" in str(
            engine.get_run("inp").park_reason
        )
    with sqlite3.connect(db) as conn:
        _clean("the events table", repr(conn.execute("SELECT * FROM events").fetchall()))


def _slow(url: str, *, api_key: str) -> str:
    import time

    time.sleep(0.5)
    return "late"


async def _async_call(url: str, *, api_key: str) -> str:
    return "never"


def test_a_step_function_is_named_in_errors_never_its_repr_with_bound_arguments(
    tmp_path: Path,
) -> None:
    # functools.partial's repr lists its bound arguments; a value passed where the step's
    # function belongs is the value: errors quoted them into step.failed / run.blocked.
    import functools

    db = tmp_path / "j.db"
    with durably.Engine(f"sqlite:///{db}", park_wait_s=0) as engine:
        slow = durably.step(timeout_s=0.05)(functools.partial(_slow, api_key=OLD))
        call = functools.partial(_async_call, api_key=OLD)

        @engine.workflow(name="timeout")
        def timeout(ctx: durably.Context) -> str:
            return ctx.step("fetch", slow, "https://api.example")

        @engine.workflow(name="async_in_sync")
        def async_in_sync(ctx: durably.Context) -> str:
            return ctx.step("fetch", call, "https://api.example")

        @engine.workflow(name="not_callable")
        def not_callable(ctx: durably.Context) -> str:
            return ctx.step("fetch", OLD)  # type: ignore[arg-type]  # arguments swapped

        for wf, error in (
            (timeout, durably.WorkflowFailed),
            (async_in_sync, durably.ConfigError),  # a misuse: the run blocks
            (not_callable, durably.ConfigError),
        ):
            with pytest.raises(error) as err:
                engine.run(wf, run_id=wf.name)
            _clean(f"{wf.name}: the exception", str(err.value))
            run = engine.get_run(wf.name)
            _clean(f"{wf.name}: the run", f"{run.park_reason} {run.error_message}")
        assert "functools.partial(_slow, ...)" in str(engine.get_run("timeout").error_message)
        assert "a str value is not callable" in str(engine.get_run("not_callable").park_reason)
    with sqlite3.connect(db) as conn:
        _clean("the events table", repr(conn.execute("SELECT * FROM events").fetchall()))
