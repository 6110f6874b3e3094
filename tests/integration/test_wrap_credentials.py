"""A wrapped client's credentials stay out of the journal even when the provider quotes
them back. Request headers are never recorded as a call's inputs; but a failed call is
recorded with its error's text, and a server or gateway answering 401/429/5xx may quote
the request's ``Authorization``, ``x-api-key`` or a custom header in its error body (the
client puts the body in the exception's message). Once, that text reached the step's
record, its ``step.retried``/``step.failed`` events, ``StepFailed`` and ``runs tail``
with the API key in clear."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from click.testing import CliRunner

import durably
from durably.cli import main as cli
from durably.integrations import anthropic as wrap_anthropic
from durably.integrations import openai as wrap_openai

from .model_servers import ModelServer, Reply, anthropic_message, chat_completion

KEY = "sk-test-PLANTED-KEY-0001"
HEADER = "PLANTED-HEADER-0002"
QUERY = "PLANTED-QUERY-0003"
SECRETS = ("PLANTED",)


class Echo:
    """A server whose first ``failures`` replies quote every request header back."""

    def __init__(self, status: int, failures: int, ok: Any) -> None:
        self.status, self.failures, self.ok = status, failures, ok
        self.server = ModelServer(self.reply)

    def reply(self, path: str, body: dict[str, Any]) -> Reply:
        if self.failures <= 0:
            return 200, {}, self.ok
        self.failures -= 1
        seen = dict(self.server.seen[-1].headers)
        message = f"rejected {path}: headers {json.dumps(seen)}"
        error = {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
        return self.status, {"retry-after-ms": "1"}, error


@pytest.fixture(params=["openai", "anthropic"])
def provider(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _call(provider: str, url: str) -> Any:
    if provider == "openai":
        oc = wrap_openai.wrap(
            openai.OpenAI(
                api_key=KEY, base_url=f"{url}/v1", default_headers={"X-Team-Token": HEADER}
            )
        )
        return lambda: oc.chat.completions.create(
            model="gpt-test",
            messages=[{"role": "user", "content": "hi"}],
            extra_headers={"X-Call-Token": HEADER + "-call"},
            extra_query={"sig": QUERY},
        )
    ac = wrap_anthropic.wrap(
        anthropic.Anthropic(api_key=KEY, base_url=url, default_headers={"X-Team-Token": HEADER})
    )
    return lambda: ac.messages.create(
        model="claude-test",
        max_tokens=10,
        messages=[{"role": "user", "content": "hi"}],
        extra_headers={"X-Call-Token": HEADER + "-call"},
        extra_query={"sig": QUERY},
    )


def _ok(provider: str) -> Any:
    return chat_completion("hi") if provider == "openai" else anthropic_message("hi")


def _clean(where: str, text: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"{where} shows {secret!r}:\n{text}"


def _journal_text(url: str, db: Path) -> str:
    if url.startswith("sqlite"):
        return b"".join(p.read_bytes() for p in (db, Path(f"{db}-wal")) if p.exists()).decode(
            "latin-1"
        )
    return ""


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    db = tmp_path / "j.db"
    yield f"sqlite:///{db}", db


@pytest.mark.parametrize("status", [401, 400])
def test_a_failed_call_whose_error_quotes_the_request_headers_records_no_credential(
    provider: str, journal: tuple[str, Path], status: int
) -> None:
    url, db = journal
    echo = Echo(status, failures=1, ok=_ok(provider))
    try:
        with durably.Engine(url) as engine:
            call = _call(provider, echo.server.url)

            @engine.workflow(name="wf")
            def wf(ctx: durably.Context) -> str:
                call()
                return "done"

            with pytest.raises(durably.WorkflowFailed) as err:
                engine.run("wf", run_id="r1")
            text = f"{err.value}\n{err.value!r}"
            assert f"Error code: {status}" in text  # the error is still said
            assert "***" in text  # and the quoted credentials are masked, not cut
            _clean("the exception", text)
            events = [f"{e.kind} {e.data}" for e in engine.events("r1").events]
            _clean("the events", "\n".join(events))
            hist = engine.history("r1")
            _clean("the history", repr(hist))
        assert "Bearer " + KEY in json.dumps(echo.server.seen[0].headers) or KEY in json.dumps(
            echo.server.seen[0].headers
        )  # the key was sent: the server had something to quote
        _clean("the journal file", _journal_text(url, db))
        runner = CliRunner(env={"COLUMNS": "300"})
        for args in (("runs", "tail", "r1", "--json"), ("runs", "show", "r1", "--json")):
            out = runner.invoke(cli, [*args, "--db", url])
            assert out.exit_code == 0, out.output
            _clean(" ".join(args), out.output)
    finally:
        echo.server.close()


def test_a_retried_call_whose_rate_limit_quotes_the_key_records_no_credential(
    provider: str, journal: tuple[str, Path]
) -> None:
    url, db = journal
    echo = Echo(429, failures=1, ok=_ok(provider))
    try:
        with durably.Engine(url) as engine:
            call = _call(provider, echo.server.url)

            @engine.workflow(name="wf")
            def wf(ctx: durably.Context) -> str:
                call()
                return "done"

            assert engine.run("wf", run_id="r1") == "done"
            events = [f"{e.kind} {e.data}" for e in engine.events("r1").events]
            assert any("retried" in e for e in events), events
            _clean("the events", "\n".join(events))
        _clean("the journal file", _journal_text(url, db))
    finally:
        echo.server.close()
