"""Human approvals decide exactly what was shown: no way to decide something other than
what was shown, or to be told a decision was taken that nothing will act on. Real SQLite files and
real PostgreSQL schemas; hand-edited rows written with sqlite3 directly."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import durably
from durably.cli import main as cli

ARGS = {"order": "A-17", "amount": 20}


def client_digest(action: str, args: Any) -> str:
    text = json.dumps([action, args], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def refund(engine: durably.Engine, paid: list[str]) -> Any:
    @engine.workflow(name="refund")
    def wf(ctx: durably.Context) -> str:
        d = ctx.request_approval("refund", ARGS)
        if d.approved:
            ctx.step("pay", lambda: paid.append("pay"))
        return d.outcome

    return wf


def test_a_run_being_cancelled_takes_no_decision(journal_url: str) -> None:
    # A person approving a run whose cancel was asked for was told "approved" (with an
    # approval.decided event) while the run unwound and ended cancelled: nothing ever
    # acted on the approval. The request is no longer listed, and a decision is refused.
    paid: list[str] = []
    with durably.Engine(journal_url, park_wait_s=0) as engine:
        wf = refund(engine, paid)
        with pytest.raises(durably.RunParked):
            engine.run(wf, run_id="r1")
        digest = client_digest("refund", ARGS)
        assert [p.digest for p in engine.pending_approvals()] == [digest]
        engine.cancel("r1", "customer withdrew")
        assert engine.pending_approvals() == [] and engine.pending_approvals("r1") == []
        with pytest.raises(durably.RunFinished, match=r"being cancelled.*nothing was decided"):
            engine.approve("r1", "0", digest=digest, by="ana")
        res = CliRunner().invoke(
            cli, ["approve", "r1", "0", "--digest", digest[:8], "--db", journal_url]
        )
        assert res.exit_code == 1 and "being cancelled" in res.output
        row = engine.store.get_approval("r1", "0")
        assert row is not None and row.outcome is None
        with pytest.raises(durably.Cancelled):
            engine.resume("r1")
        assert engine.get_run("r1").status == "cancelled" and paid == []
        kinds = [e.kind for e in engine.events("r1").events]
        assert "approval.decided" not in kinds


def test_an_approvals_row_for_another_action_blocks_the_run(tmp_path: Path) -> None:
    # The run's driver took the decision of its approvals row without checking that the
    # row is the request it recorded: a row edited to show other arguments (and their
    # digest) could be approved, and the run acted on its own, different arguments.
    paid: list[str] = []
    url = f"sqlite:///{tmp_path / 'j.db'}"
    with durably.Engine(url, park_wait_s=0) as engine:
        wf = refund(engine, paid)
        with pytest.raises(durably.RunParked):
            engine.run(wf, run_id="r1")
        shown = {"order": "A-17", "amount": 1}
        with sqlite3.connect(tmp_path / "j.db") as db:
            db.execute(
                "UPDATE approvals SET args = ?, digest = ?",
                (
                    json.dumps(shown, sort_keys=True, separators=(",", ":")),
                    client_digest("refund", shown),
                ),
            )
        engine.approve("r1", "0", digest=client_digest("refund", shown), by="ana")
        with pytest.raises(durably.SerializationError, match="edited by hand"):
            engine.resume("r1")
        assert engine.get_run("r1").status == "blocked" and paid == []


@pytest.mark.parametrize("shown", ['{"amount":1,"order":"A-17"}', "{bad"])
def test_a_row_whose_arguments_are_not_its_digest_cannot_be_decided(
    tmp_path: Path, shown: str
) -> None:
    # The digest binds a decision to the action shown only if what is shown hashes to it:
    # a row whose arguments were edited (digest kept) was approved by its digest prefix
    # while `durably approve` printed the edited arguments, and the run then acted on
    # the recorded ones.
    paid: list[str] = []
    url = f"sqlite:///{tmp_path / 'j.db'}"
    with durably.Engine(url, park_wait_s=0) as engine:
        wf = refund(engine, paid)
        with pytest.raises(durably.RunParked):
            engine.run(wf, run_id="r1")
        with sqlite3.connect(tmp_path / "j.db") as db:
            db.execute("UPDATE approvals SET args = ?", (shown,))
        digest = client_digest("refund", ARGS)
        with pytest.raises(durably.DurablyError, match=r"edited by hand.*Nothing was decided"):
            engine.approve("r1", "0", digest=digest, by="ana")
        res = CliRunner().invoke(cli, ["approve", "r1", "0", "--digest", digest[:8], "--db", url])
        assert res.exit_code == 1 and "do not hash to its digest" in res.output
        row = engine.store.get_approval("r1", "0")
        assert row is not None and row.outcome is None
        with pytest.raises(durably.RunParked):
            engine.resume("r1")
        assert paid == []


# A client in another language: JavaScript's own JSON, keys sorted, sha256 of the UTF-8.
NODE_DIGEST = r"""
const crypto = require("crypto");
const sorted = (v) => Array.isArray(v) ? v.map(sorted)
  : v !== null && typeof v === "object"
    ? Object.fromEntries(Object.keys(v).sort().map((k) => [k, sorted(v[k])])) : v;
const rows = JSON.parse(require("fs").readFileSync(0, "utf8"));
const out = rows.map((r) => crypto.createHash("sha256")
  .update(JSON.stringify([r.action, sorted(r.args)]), "utf8").digest("hex"));
process.stdout.write(JSON.stringify(out));
"""

MIXED = {
    "amount": 20.0,
    "fee": 1.5,
    "zero": -0.0,
    "sum": 0.1 + 0.2,
    "big": 2**53 - 1,
    "memo": 'café ☕ 🙂 \x1f\x7f \u2028 "q" \\',
    "nested": {"é": [1.0, {"b": True, "a": None}], "Z": "z", "a": 123456.789},
}


def test_a_javascript_client_recomputes_the_listed_digest(tmp_path: Path) -> None:
    # The digest was json.dumps of the workflow's own values: 20.0 hashed as "20.0",
    # -0.0 as "-0.0", while every JavaScript (or Go) client that reads the listed args
    # writes 20 and 0, so it could never recompute the digest of a request with a
    # whole-valued float in it.
    import shutil
    import subprocess

    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    url = f"sqlite:///{tmp_path / 'j.db'}"
    with durably.Engine(url, park_wait_s=0) as engine:

        @engine.workflow(name="wf")
        def wf(ctx: durably.Context) -> str:
            return ctx.request_approval("refund", MIXED).outcome

        with pytest.raises(durably.RunParked):
            engine.run(wf, run_id="r1")
        listed = CliRunner().invoke(cli, ["approvals", "list", "--json", "--db", url])
        assert listed.exit_code == 0, listed.output
        got = subprocess.run(
            [node, "-e", NODE_DIGEST], input=listed.output, capture_output=True, text=True
        )
        assert got.returncode == 0, got.stderr
        [p] = engine.pending_approvals()
        assert json.loads(got.stdout) == [p.digest]
        assert client_digest(p.action, p.args) == p.digest  # the documented Python recipe
        assert type(json.loads(listed.output)[0]["args"]["amount"]) is int  # listed as 20
        assert engine.approve("r1", "0", digest=p.digest).approved


@pytest.mark.parametrize("value", [1e-05, 1e16, -2.5e-7, 1.5e300])
def test_a_float_other_languages_print_otherwise_blocks_the_run(
    tmp_path: Path, value: float
) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    with durably.Engine(url, park_wait_s=0) as engine:

        @engine.workflow(name="wf")
        def wf(ctx: durably.Context) -> str:
            return ctx.request_approval("refund", {"rate": value}).outcome

        with pytest.raises(durably.ConfigError, match="pass it as a string"):
            engine.run(wf, run_id="r1")
        assert engine.get_run("r1").status == "blocked" and engine.pending_approvals() == []


def test_bidi_marks_and_line_separators_are_shown_escaped(tmp_path: Path) -> None:
    # `durably approvals list` and `durably approve` printed the bidirectional marks
    # (RLM, LRM, ALM: they reorder the digits and signs around them) and U+2028/U+2029
    # (line breaks in some terminals) raw, so the arguments a person approved could read
    # otherwise than they are; the overrides (U+202E) were already escaped.
    sneaky = "\u200f\u061c\u200e\u2028\u2029"
    url = f"sqlite:///{tmp_path / 'j.db'}"
    with durably.Engine(url, park_wait_s=0) as engine:

        @engine.workflow(name="wf")
        def wf(ctx: durably.Context) -> str:
            return ctx.request_approval("pay" + sneaky, {"to": "acct-1" + sneaky}).outcome

        with pytest.raises(durably.RunParked):
            engine.run(wf, run_id="r1")
        [p] = engine.pending_approvals()
        wide = {"COLUMNS": "300"}  # so the table does not fold "<U+200F>"
        listed = CliRunner(env=wide).invoke(cli, ["approvals", "list", "--db", url])
        shown = CliRunner(env=wide).invoke(
            cli, ["approve", "r1", "0", "--digest", p.digest[:8], "--db", url]
        )
        for out in (listed.output, shown.output):
            assert not set(sneaky) & set(out), repr(out)
        # shown as durably.visible writes every format character (once `\u200f`)
        assert "<U+200F>" in listed.output and "acct-1<U+200F><U+061C>" in shown.output


@pytest.mark.postgres
def test_a_retried_decision_with_a_wrong_digest_is_refused(pg_url: str) -> None:
    # PostgreSQL retries a decision once on a lost connection and took a row already
    # holding the same outcome, by and note as its own committed first attempt, without
    # the digest: a wrong digest whose connection dropped was answered "approved" when
    # someone else (anonymous too) had approved the request meanwhile.
    import psycopg

    paid: list[str] = []
    with (
        durably.Engine(pg_url, park_wait_s=0) as engine,
        durably.Engine(pg_url, park_wait_s=0) as other,
    ):
        wf = refund(engine, paid)
        with pytest.raises(durably.RunParked):
            engine.run(wf, run_id="r1")
        digest = client_digest("refund", ARGS)
        store: Any = engine.store
        call = store._call
        dropped: list[bool] = []

        def drop_first(op: Any, durable: bool = True) -> Any:
            def attempt(conn: Any, retried: bool) -> Any:
                if not dropped:  # someone else decides, then this connection dies
                    dropped.append(True)
                    other.approve("r1", "0", digest=digest)
                    raise psycopg.OperationalError("injected: the server closed the connection")
                return op(conn, retried)

            return call(attempt, durable)

        store._call = drop_first
        wrong = client_digest("refund", {**ARGS, "amount": 20000})
        with pytest.raises(durably.ApprovalMismatch):
            engine.approve("r1", "0", digest=wrong)
        assert dropped == [True]


def test_an_action_too_long_for_its_on_timeout_step_blocks_at_the_request(
    tmp_path: Path,
) -> None:
    # An action of 190 to 200 bytes is a valid action, but "on_timeout:" + action is too
    # long a step name: the run waited out the whole timeout, took the expiry, and only
    # then blocked on the name. It is refused when the request is made.
    clock = durably.FakeClock()
    url = f"sqlite:///{tmp_path / 'j.db'}"
    with durably.Engine(url, park_wait_s=0, clock=clock) as engine:

        @engine.workflow(name="wf")
        def wf(ctx: durably.Context) -> str:
            d = ctx.request_approval("a" * 195, {}, timeout_s=86400, on_timeout=lambda: "x")
            return str(d.value)

        with pytest.raises(durably.ConfigError, match="shorter action"):
            engine.run(wf, run_id="r1")
        assert engine.get_run("r1").status == "blocked" and engine.history("r1") == []


def test_an_upper_case_digest_is_refused_saying_why(tmp_path: Path) -> None:
    # The API compares digests exactly; an upper-cased copy of the right digest was
    # refused as "another action", which sends the person re-reading the request.
    url = f"sqlite:///{tmp_path / 'j.db'}"
    with durably.Engine(url, park_wait_s=0) as engine:
        wf = refund(engine, [])
        with pytest.raises(durably.RunParked):
            engine.run(wf, run_id="r1")
        digest = client_digest("refund", ARGS)
        with pytest.raises(durably.ApprovalMismatch, match="lowercase hex"):
            engine.approve("r1", "0", digest=digest.upper())
        assert engine.pending_approvals()[0].digest == digest


def test_the_approve_command_runs_why_prints_works_for_a_run_id_like_an_option(
    tmp_path: Path,
) -> None:
    # `runs why` printed `durably approve -r1 0 --digest ...` for run "-r1", which click
    # reads as an unknown option -r: the exact command it promises exited 2.
    import re
    import shlex

    url = f"sqlite:///{tmp_path / 'j.db'}"
    with durably.Engine(url, park_wait_s=0) as engine:
        wf = refund(engine, [])
        with pytest.raises(durably.RunParked):
            engine.run(wf, run_id="-r1")
        why = CliRunner().invoke(cli, ["runs", "why", "--db", url, "--", "-r1"])
        found = re.search(r"`(durably approve [^`]*)`", why.output)
        assert found is not None, why.output
        command = shlex.split(found.group(1))[1:]
        done = CliRunner().invoke(cli, [command[0], "--db", url, *command[1:]])
        assert done.exit_code == 0, done.output
        assert "approved run -r1 request 0" in done.output
