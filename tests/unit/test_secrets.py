"""No command, error or stored message shows a database password (issue 9 §3 "Secrets").

Every command runs against the real PostgreSQL server (trust auth accepts any password,
so a URL with one still connects) and through the error paths that quote a URL: unknown
schemes, a bad percent-escape that libpq echoes, a missing run, a worker bound elsewhere.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import traceback
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import durably
from durably.cli import main
from durably.redact import redact, redact_url

from .cli_support import start_worker

SECRET = "Hunter2Secret"


def with_password(url: str) -> str:
    """``url`` with SECRET as the password of its user."""
    scheme, rest = url.split("://", 1)
    userinfo, at, host = rest.partition("@")
    if not at:
        userinfo, host = "postgres", rest
    return f"{scheme}://{userinfo.split(':')[0]}:{SECRET}@{host}"


def invoke(*args: str) -> Any:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def assert_clean(result: Any) -> str:
    text = f"{result.stdout}\n{result.stderr}"
    assert SECRET not in text, text
    return text


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("postgresql://app:s3cretpw@db:5432/x", "postgresql://app:***@db:5432/x"),
        ("see 'postgres://app:p@ss/word@db/x' now", "see 'postgres://app:***@db/x' now"),
        ("postgresql://db/x?sslmode=require&password=s3cretpw", None),
        ("postgresql://db/x?PASSWORD=s3cretpw#frag", None),
        ("host=db user=app password='s 3cretpw' dbname=x", None),
        ("host=db sslpassword=s3cretpw", None),
        ("mysql://root:s3cretpw@h/db", "mysql://root:***@h/db"),
        # libpq keeps quotes, ";" and "," in a password: none of them ends the mask.
        ("postgresql://app:s3cretpw'q\"@db/x", "postgresql://app:***@db/x"),
        ("postgresql://db/x?password=ab;s3cretpw&sslmode=require", None),
        ("postgresql://db/x?password=ab,s3cretpw", None),
        ("host=db password=ab;s3cretpw dbname=x", "host=db password=*** dbname=x"),
        ("'postgresql://db/x?password=s3cretpw'", "'postgresql://db/x?password=***'"),
    ],
)
def test_redact_masks_every_form_of_credential(text: str, shown: str | None) -> None:
    out = redact(text)
    assert "s3cretpw" not in out and "3cretpw" not in out, out
    assert "***" in out
    if shown is not None:
        assert out == shown


def test_redact_masks_a_urls_secret_where_it_stands_alone() -> None:
    url = "postgresql://app:p%zzs3cretpw@db/x"
    assert redact('invalid percent-encoded token: "p%zzs3cretpw"', url=url) == (
        'invalid percent-encoded token: "***"'
    )
    assert "hunter" in redact("hunter", url="postgresql://a:hunter2@h/x")  # short text kept


def test_redact_url_masks_a_password_the_patterns_cannot_parse() -> None:
    # A blank in the password: libpq refuses the URL, quoting the password back.
    url = "postgresql://app:s3cret pw@db/x"
    assert redact_url(url) == "postgresql://app:***@db/x"
    assert "s3cret" not in redact('unexpected spaces found in "s3cret pw"', url=url)


def test_redact_leaves_urls_without_credentials_alone() -> None:
    for text in ("postgresql://app@db:5432/x", "sqlite:///a/b.db", "no url at all: x=1"):
        assert redact(text) == text


@pytest.fixture(params=["userinfo", "query", "quotes", "semicolon", "comma"])
def secret_url(pg_url: str, request: pytest.FixtureRequest) -> str:
    """The test schema's URL with SECRET in its password, in the user info or as a
    ``password=`` query parameter (the form ``migrate``'s old redaction missed), with the
    special characters libpq accepts in either (trust auth connects whatever they are)."""
    if request.param == "userinfo":
        return with_password(pg_url)
    if request.param == "quotes":
        return with_password(pg_url).replace(SECRET, f"{SECRET}'q\"", 1)
    if request.param == "semicolon":
        return f"{pg_url}&password=ab;{SECRET}"
    if request.param == "comma":
        return f"{pg_url}&password=ab,{SECRET}"
    return f"{pg_url}&password={SECRET}"


def test_every_command_on_a_url_with_a_password(secret_url: str, tmp_path: Path) -> None:
    with durably.Engine(secret_url) as engine:

        @engine.workflow(name="w")
        def w(ctx: durably.Context) -> int:
            return 1

        engine.run(w, run_id="r1")
    for args in (
        ["runs", "list", "--db", secret_url],
        ["runs", "list", "--db", secret_url, "--json"],
        ["runs", "show", "r1", "--db", secret_url],
        ["runs", "show", "r1", "--db", secret_url, "--json"],
        ["migrate", "--db", secret_url],
        ["migrate", "--db", secret_url, "--json"],
    ):
        result = invoke(*args)
        assert result.exit_code == 0, result.output
        assert_clean(result)
    listed = invoke("runs", "list", "--db", secret_url)
    assert "***" in listed.stdout  # the title names the database, masked
    for args in (
        ["runs", "show", "nope", "--db", secret_url],
        ["runs", "show", "nope", "--db", secret_url, "--json"],
        ["retry", "nope", "--db", secret_url],
        ["skip", "nope", "--output", "1", "--db", secret_url],
        ["retry", "r1", "--db", secret_url, "--json"],
        ["fork", "nope", "--at", "0", "--db", secret_url],
        ["fork", "nope", "--at", "0", "--db", secret_url, "--json"],
    ):
        result = invoke(*args)
        assert result.exit_code != 0, args
        text = assert_clean(result)
        assert "nope" in text or "r1" in text


@pytest.mark.parametrize(
    "url",
    [
        f"mysql://root:{SECRET}@127.0.0.1/db",
        f"postgresql://postgres:p%zz{SECRET}@127.0.0.1:5432/test",
        f"postgresql://postgres@127.0.0.1:5432/test?password=p%zz{SECRET}",
        f"postgresql://postgres:{SECRET}@127.0.0.1:1/test",  # nothing listens: refused
        f"host=127.0.0.1 password={SECRET}",
        f"host=127.0.0.1 password=ab;{SECRET}",
        f"postgresql://postgres:{SECRET} pw@127.0.0.1:5432/test",  # libpq quotes it back
        f"mysql://root:{SECRET} pw@127.0.0.1/db",
        f"postgresql://postgres:{SECRET}@[::1/test",  # libpq quotes the whole URL
    ],
)
def test_errors_that_quote_the_url_mask_the_password(url: str, pg_server_url: str) -> None:
    with pytest.raises(durably.DurablyError) as err:
        durably.Engine(url)
    assert SECRET not in str(err.value)
    # Nor in the traceback an uncaught error prints: no chained driver exception.
    assert SECRET not in "".join(traceback.format_exception(err.value))
    for args in (["runs", "list", "--db", url], ["migrate", "--db", url, "--json"]):
        result = invoke(*args)
        assert result.exit_code != 0
        assert_clean(result)


def test_run_not_found_masks_the_password(secret_url: str) -> None:
    with durably.Engine(secret_url) as engine:
        with pytest.raises(durably.RunNotFound) as err:
            engine.get_run("missing")
        with pytest.raises(durably.RunNotFound) as err2:
            engine.resume("missing")
    for e in (err, err2):
        assert SECRET not in str(e.value) and "***" in str(e.value)


def _worker_module(tmp_path: Path, url: str) -> Path:
    path = tmp_path / "agents_secret.py"
    path.write_text(
        textwrap.dedent(
            f"""
            import durably
            engine = durably.Engine({url!r})

            @engine.workflow(name="hello")
            def hello(ctx):
                return "hi"
            """
        )
    )
    return path


def test_worker_startup_line_and_url_mismatch_mask_the_password(
    secret_url: str, pg_url: str, tmp_path: Path
) -> None:
    module = _worker_module(tmp_path, secret_url)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    env.pop("DURABLY_URL", None)
    # Bound to another URL than --db says: the mismatch error names both, masked.
    other = secret_url.replace(SECRET, SECRET + "x")
    assert other != secret_url
    mismatch = start_worker(f"{module}:engine", env, None, "--db", other)
    out, err = mismatch.communicate(timeout=120)
    assert mismatch.returncode != 0
    assert "is bound to" in err
    assert SECRET not in out + err, err
    # A worker that starts: its startup line names the database, masked. SIGTERM stops it.
    worker = start_worker(f"{module}:engine", env)
    assert worker.stderr is not None
    line = worker.stderr.readline()
    worker.terminate()
    out, err = worker.communicate(timeout=120)
    assert "durably worker pid" in line and "***" in line, line + err
    assert SECRET not in line + out + err


def test_outbox_last_error_masks_urls_with_credentials(tmp_path: Path) -> None:
    import sqlite3

    from durably.idempotency import migrate
    from durably.idempotency.outbox import Outbox

    url = f"sqlite:///{tmp_path / 'app.db'}"
    migrate(url)
    outbox = Outbox(url, clock=lambda: 1000.0)
    conn = sqlite3.connect(tmp_path / "app.db")
    with conn:
        outbox.add(conn, "billing", {"amount": 1}, key="k1")
    conn.close()

    def deliver(message: Any) -> None:
        raise ConnectionError(f"cannot reach postgresql://billing:{SECRET}@billing-db/x")

    report = outbox.relay(deliver)
    assert report.retrying == 1
    [entry] = outbox.messages()
    assert entry.last_error is not None and "ConnectionError" in entry.last_error
    assert SECRET not in entry.last_error and "***" in entry.last_error
    assert SECRET not in json.dumps(entry.last_error)


def test_outbox_refuses_a_bad_url_without_echoing_its_password(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from durably.idempotency.outbox import Outbox

    for url in (
        f"postgresql://postgres:p%zz{SECRET}@127.0.0.1:5432/test",
        f"postgresql://postgres:{SECRET} pw@127.0.0.1:5432/test",
    ):
        with pytest.raises(durably.ConfigError) as err:
            Outbox(url)
        assert SECRET not in str(err.value) and "***" in str(err.value)
        assert SECRET not in "".join(traceback.format_exception(err.value))
    assert SECRET not in caplog.text


@pytest.mark.parametrize("url", [None, 5432, b"postgresql://root:s3cretpw@db/x"])
def test_a_url_that_is_not_a_str_is_a_config_error(url: Any) -> None:
    from durably.idempotency.outbox import Outbox

    for make in (durably.Engine, Outbox):
        if url is None and make is durably.Engine:
            continue  # Engine(None) means the default URL
        with pytest.raises(durably.ConfigError) as err:
            make(url)
        assert "s3cretpw" not in str(err.value)


def test_chaos_and_subprocess_commands_mask_the_password(
    secret_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    recorded = Path(__file__).resolve().parents[1] / "chaos" / "recorded_workflow.py"
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DURABLY_URL", raising=False)
    chaos = CliRunner().invoke(
        main,
        [
            *("chaos", "--workflow", f"{recorded}:stamped", "--allow-repeat", "note"),
            *("--db", secret_url),
        ],
    )
    assert chaos.exit_code == 0, chaos.output
    assert_clean(chaos)
    if request.node.callspec.params["secret_url"] not in ("userinfo", "query"):
        # The two places a password sits; the special characters of the other forms go
        # through the same redaction, checked in-process for every form above.
        return
    env = {**os.environ, "DURABLY_URL": secret_url}
    for args in (["migrate"], ["runs", "list"], ["runs", "show", "missing", "--json"]):
        proc = subprocess.run(
            [sys.executable, "-m", "durably.cli", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert SECRET not in proc.stdout + proc.stderr, (args, proc.stdout, proc.stderr)
        assert (proc.returncode == 0) == (args[-1] != "--json"), (args, proc.stderr)


def test_migrate_idempotency_errors_are_masked_and_json(pg_server_url: str) -> None:
    url = f"postgresql://postgres:p%zz{SECRET}@127.0.0.1:5432/test"
    result = invoke("migrate", "--idempotency", "--db", url, "--json")
    assert result.exit_code == 1
    text = assert_clean(result)
    assert set(json.loads(result.stdout)) == {"error"}, text
