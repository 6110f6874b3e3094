"""A run id or filter no journal can hold (a NUL, a lone surrogate) is answered, not crashed on.

Such text reaches the engine from a shell (argv bytes that are not UTF-8 decode to lone
surrogates), from a URL a dashboard decodes, or from a typo'd ``\\x00``. PostgreSQL
refuses a NUL in a query (a ``StoreError`` blaming the database) and neither driver can
send a lone surrogate (a bare ``UnicodeEncodeError``, a traceback from the CLI). No run
can have such an id, so reads say ``RunNotFound`` (listings: nothing), and a filter
holding one is a ``ConfigError`` saying what to pass; both stores, the real commands.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from click.testing import CliRunner

import durably
from durably.cli import main as cli

BAD_IDS = ["a\x00b", "\udcff", "ok\udc80"]


@pytest.fixture
def engine(journal_url: str) -> Iterator[durably.Engine]:
    e = durably.Engine(journal_url, park_wait_s=0)

    @e.workflow(name="wf")
    def wf(ctx: durably.Context) -> str:
        return "ok"

    e.run(wf, run_id="real")  # a journal with a run in it: the bad id is not just absent
    yield e
    e.close()


NOT_FOUND: dict[str, Callable[[durably.Engine, str], Any]] = {
    "get_run": lambda e, r: e.get_run(r),
    "history": lambda e, r: e.history(r),
    "spend": lambda e, r: e.spend(r),
    "events": lambda e, r: e.events(r),
    "follow": lambda e, r: e.follow(r),
    "explain": lambda e, r: durably.explain(e, r),
    "resume": lambda e, r: e.resume(r),
    "signal": lambda e, r: e.signal(r, "go"),
    "cancel": lambda e, r: e.cancel(r),
    "retry": lambda e, r: e.retry(r),
    "fork": lambda e, r: e.fork(r, at=0),
    "skip": lambda e, r: e.skip(r, None),
    "approve": lambda e, r: e.approve(r, "0", digest="ab" * 32),
    "reject": lambda e, r: e.reject(r, "0", digest="ab" * 32),
}


@pytest.mark.parametrize("bad", BAD_IDS, ids=["nul", "surrogate", "trailing-surrogate"])
@pytest.mark.parametrize("call", sorted(NOT_FOUND))
def test_reads_and_decisions_say_run_not_found(engine: durably.Engine, call: str, bad: str) -> None:
    with pytest.raises(durably.RunNotFound, match="a run id never holds"):
        NOT_FOUND[call](engine, bad)


@pytest.mark.parametrize("bad", BAD_IDS, ids=["nul", "surrogate", "trailing-surrogate"])
def test_listings_of_such_a_run_are_empty(engine: durably.Engine, bad: str) -> None:
    assert engine.pending_approvals(bad) == []
    assert engine.pending_approval_rows(bad) == []
    assert engine.approval_row(bad, "0") is None
    assert engine.approval_row("real", bad) is None


@pytest.mark.parametrize("field", ["search", "workflow", "version", "queue"])
@pytest.mark.parametrize("bad", BAD_IDS, ids=["nul", "surrogate", "trailing-surrogate"])
def test_filters_holding_them_are_config_errors(
    engine: durably.Engine, field: str, bad: str
) -> None:
    with pytest.raises(durably.ConfigError, match="which no journal text holds"):
        engine.list_runs(**{field: bad})
    with pytest.raises(durably.ConfigError, match="which no journal text holds"):
        engine.count_runs(**{field: bad})
    if field == "queue":
        with pytest.raises(durably.ConfigError, match="which no journal text holds"):
            engine.live_workers(bad)


@pytest.mark.parametrize(
    "argv",
    [
        ["runs", "show", "\udcff"],
        ["runs", "why", "\udcff"],
        ["runs", "tail", "a\x00b"],
        ["runs", "list", "--search", "\udcff"],
        ["approvals", "list", "--run", "\udcff"],
    ],
    ids=["show", "why", "tail", "list-search", "approvals"],
)
def test_commands_answer_without_a_traceback(
    engine: durably.Engine, journal_url: str, argv: list[str]
) -> None:
    res = CliRunner().invoke(cli, [*argv, "--db", journal_url, "--json"])
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    out = json.loads(res.stdout)
    if argv[0] == "approvals":
        assert res.exit_code == 0 and out == []
    else:
        assert res.exit_code == 1
        assert "never holds" in out["error"] or "no journal text holds" in out["error"]
