"""Human approvals through the engine, on both stores: ``ctx.request_approval`` parks the
run bound to the digest of ``[action, args]``; ``engine.approve``/``reject`` decide once;
an expiry is a recorded outcome taken once. Timeouts run on a FakeClock (``engine.run``
waits in-process by sleeping the fake clock to the recorded expiry: no real sleeping).
The crash variant (a real SIGKILL during the expiry) is tests/crash/test_approval_crash.py.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import durably
from durably.history import OK, WAITING


@pytest.fixture
def clock() -> durably.FakeClock:
    return durably.FakeClock()


@pytest.fixture
def engine(journal_url: str, clock: durably.FakeClock) -> Iterator[durably.Engine]:
    # park_wait_s=0: engine.run returns RunParked at once instead of waiting in-process.
    with durably.Engine(journal_url, clock=clock, park_wait_s=0) as e:
        yield e


ARGS = {"order": "A-17", "amount": 20.5, "currency": "EUR", "memo": "café ☕", "items": [1, 2]}


def client_digest(action: str, args: Any) -> str:
    """What any client computes from the listed action and arguments (docs/api.md)."""
    text = json.dumps([action, args], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def refund_flow(engine: durably.Engine, **options: Any) -> Any:
    calls: list[str] = []

    @engine.workflow(name="refund")
    def refund(ctx: durably.Context, args: dict[str, Any]) -> dict[str, Any]:
        ctx.step("plan", lambda: "plan")
        d = ctx.request_approval("refund", args, **options)
        if d.approved:
            ctx.step("pay", lambda: calls.append("pay"))
        return {"outcome": d.outcome, "by": d.by, "note": d.note, "value": d.value}

    return refund, calls


def park(engine: durably.Engine, wf: Any, run_id: str = "r1") -> None:
    with pytest.raises(durably.RunParked):
        engine.run(wf, ARGS, run_id=run_id)


def test_the_listed_digest_is_the_one_a_client_recomputes(engine: durably.Engine) -> None:
    wf, _ = refund_flow(engine)
    park(engine, wf)
    [p] = engine.pending_approvals()
    assert (p.run_id, p.request_id, p.action, p.args) == ("r1", "1", "refund", ARGS)
    assert p.digest == client_digest("refund", ARGS)
    assert p.expires_at is None and p.requested_at.tzinfo is not None
    assert engine.pending_approvals("r1") == [p] and engine.pending_approvals("other") == []
    # The history binds the request to the same digest.
    rec = engine.history("r1")[-1]
    assert (rec.kind, rec.name, rec.status, rec.digest) == (
        "approval",
        "request_approval:refund",
        WAITING,
        p.digest,
    )


def test_wrong_digest_is_refused_and_nothing_changes(engine: durably.Engine) -> None:
    wf, calls = refund_flow(engine)
    park(engine, wf)
    before = (engine.pending_approvals(), engine.get_run("r1"), engine.history("r1"))
    other = client_digest("refund", {**ARGS, "amount": 20000})
    for wrong in (other, client_digest("refund", ARGS)[:12], ""):
        with pytest.raises(durably.ApprovalMismatch, match="nothing changed"):
            engine.approve("r1", "1", digest=wrong, by="mallory")
        with pytest.raises(durably.ApprovalMismatch):
            engine.reject("r1", "1", digest=wrong, reason="x")
    assert (engine.pending_approvals(), engine.get_run("r1"), engine.history("r1")) == before
    park(engine, wf)  # still waiting
    assert calls == []


def test_right_digest_is_accepted_once_and_the_run_goes_on(
    engine: durably.Engine, clock: durably.FakeClock
) -> None:
    wf, calls = refund_flow(engine)
    park(engine, wf)
    digest = engine.pending_approvals()[0].digest
    clock.advance(30)
    d = engine.approve("r1", "1", digest=digest, by="ana", note="checked the order")
    assert (d.outcome, d.approved, d.by, d.note) == ("approved", True, "ana", "checked the order")
    assert d.decided_at.timestamp() == clock.time()
    assert engine.pending_approvals() == []
    with pytest.raises(durably.ApprovalAlreadyDecided, match=r"approved \(by 'ana'\)") as err:
        engine.reject("r1", "1", digest=digest, by="bob", reason="too late")
    assert err.value.by == "ana" and err.value.decided_at == clock.time()
    out = engine.run(wf, ARGS, run_id="r1")
    assert out == {"outcome": "approved", "by": "ana", "note": "checked the order", "value": None}
    assert calls == ["pay"]
    with pytest.raises(durably.ApprovalAlreadyDecided):
        engine.approve("r1", "1", digest=digest, by="ana")
    kinds = [e.kind for e in engine.events("r1").events]
    assert kinds.count("approval.requested") == 1 and kinds.count("approval.decided") == 1


def test_reject_returns_the_reason_as_the_note(engine: durably.Engine) -> None:
    wf, calls = refund_flow(engine)
    park(engine, wf)
    digest = client_digest("refund", ARGS)
    d = engine.reject("r1", "1", digest=digest, by="ana", reason="duplicate order")
    assert (d.outcome, d.approved, d.note) == ("rejected", False, "duplicate order")
    out = engine.run(wf, ARGS, run_id="r1")
    assert out["outcome"] == "rejected" and out["note"] == "duplicate order"
    assert calls == []


def test_unknown_run_or_request(engine: durably.Engine) -> None:
    wf, _ = refund_flow(engine)
    park(engine, wf)
    digest = client_digest("refund", ARGS)
    with pytest.raises(durably.RunNotFound):
        engine.approve("nope", "1", digest=digest)
    with pytest.raises(durably.ApprovalNotFound, match="no approval request '0'"):
        engine.approve("r1", "0", digest=digest)  # position 0 is the plan step


def test_expiry_rejects_once_on_the_fake_clock(journal_url: str) -> None:
    clock = durably.FakeClock()
    with durably.Engine(journal_url, clock=clock) as engine:
        wf, calls = refund_flow(engine, timeout_s=3600)
        started = clock.time()
        # engine.run waits in-process for the recorded expiry (the fake clock sleeps).
        out = engine.run(wf, ARGS, run_id="r1")
        assert out == {"outcome": "expired", "by": None, "note": None, "value": None}
        assert clock.time() >= started + 3600 and calls == []
        rec = engine.history("r1")[1]
        assert rec.status == OK and json.loads(rec.output or "")["outcome"] == "expired"
        with pytest.raises(durably.ApprovalAlreadyDecided, match="expired"):
            engine.approve("r1", "1", digest=client_digest("refund", ARGS))
        kinds = [e.kind for e in engine.events("r1").events]
        assert kinds.count("approval.decided") == 1


def test_a_decision_after_the_expiry_is_refused(
    engine: durably.Engine, clock: durably.FakeClock
) -> None:
    wf, _ = refund_flow(engine, timeout_s=60)
    park(engine, wf)
    clock.advance(61)  # past the expiry, before the run took it
    [p] = engine.pending_approvals()  # still listed: its run takes the expiry when it wakes
    with pytest.raises(durably.ApprovalAlreadyDecided, match="already expired"):
        engine.approve("r1", "1", digest=p.digest, by="ana")
    assert engine.run(wf, ARGS, run_id="r1")["outcome"] == "expired"


def test_a_re_park_before_the_expiry_wakes_at_the_recorded_expiry(
    engine: durably.Engine, clock: durably.FakeClock
) -> None:
    """The run wakes before its request expires (a sibling branch's timer) and parks
    on the request again: the expiry is the one recorded with the request, never the
    time of this replay plus ``timeout_s``."""

    @engine.workflow(name="gathered")
    async def wf(ctx: durably.AsyncContext) -> str:
        decision, _ = await ctx.gather(
            ctx.request_approval("refund", ARGS, timeout_s=3600), ctx.sleep(60)
        )
        outcome: str = decision.outcome
        return outcome

    start = clock.time()
    with pytest.raises(durably.RunParked):
        engine.run(wf, run_id="g")
    assert engine.get_run("g").wake_at == start + 60
    clock.advance(600)  # the timer is over, the request is not
    with pytest.raises(durably.RunParked):
        engine.resume("g")
    assert engine.get_run("g").wake_at == start + 3600
    [p] = engine.pending_approvals("g")
    assert p.expires_at is not None and p.expires_at.timestamp() == start + 3600
    clock.advance(3000)  # the recorded expiry
    assert engine.resume("g") == "expired"


def _edit_journal(url: str, sql: str) -> None:
    """Run ``sql`` on the journal directly (a hand edit), on either store."""
    if url.startswith("sqlite:///"):
        import sqlite3

        conn = sqlite3.connect(url[len("sqlite:///") :])
        with conn:
            assert conn.execute(sql).rowcount == 1
        conn.close()
        return
    import psycopg

    with psycopg.connect(url, autocommit=True) as pg:
        assert pg.execute(sql).rowcount == 1


def test_one_damaged_approvals_row_is_skipped_and_reported_the_rest_served(
    engine: durably.Engine, journal_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A hand-edited row (a time that is no time, arguments that are not JSON) must not
    make the list fail for every run: it is left out, named in a warning, and every
    other request is listed."""
    wf, _ = refund_flow(engine, timeout_s=3600)
    for run_id in ("bad-time", "bad-args", "fine"):
        park(engine, wf, run_id)
    # SQLite keeps text in a REAL column; PostgreSQL takes only a number (NaN is one).
    when = "'yesterday'" if journal_url.startswith("sqlite") else "'NaN'"
    _edit_journal(
        journal_url, f"UPDATE approvals SET requested_at = {when} WHERE run_id = 'bad-time'"
    )
    _edit_journal(journal_url, "UPDATE approvals SET args = '{oops' WHERE run_id = 'bad-args'")
    with caplog.at_level("WARNING", logger="durably"):
        listed = engine.pending_approvals()
    assert [p.run_id for p in listed] == ["fine"]
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any("'bad-time' approval 1" in m and "no time" in m for m in warned), warned
    assert any("'bad-args'" in m and "not JSON" in m for m in warned), warned
    # The rows as stored: the unreadable time is left out, the text arguments shown.
    assert sorted(r.run_id for r in engine.pending_approval_rows()) == ["bad-args", "fine"]
    assert engine.pending_approvals("bad-time") == []
    assert [p.run_id for p in engine.pending_approvals("fine")] == ["fine"]
    # The fine request is still decided as usual.
    engine.approve("fine", "1", digest=listed[0].digest, by="ana")
    assert engine.pending_approvals() == []


def test_on_timeout_callable_runs_once_as_a_recorded_step(
    engine: durably.Engine, clock: durably.FakeClock
) -> None:
    fallbacks: list[int] = []

    def escalate() -> str:
        fallbacks.append(1)
        return "paged the on-call lead"

    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> Any:
        d = ctx.request_approval("refund", ARGS, timeout_s=60, on_timeout=escalate)
        ctx.sleep(600)  # parks again: the resume below replays the expired branch
        return [d.outcome, d.value]

    with pytest.raises(durably.RunParked):
        engine.run(wf, run_id="r1")
    clock.advance(60)
    with pytest.raises(durably.RunParked):
        engine.resume("r1")  # the expiry, the callable, then the timer
    assert fallbacks == [1]
    history = engine.history("r1")
    assert [(r.position, r.name, r.status) for r in history[:2]] == [
        ("0", "request_approval:refund", OK),
        ("1", "on_timeout:refund", OK),
    ]
    clock.advance(600)
    assert engine.resume("r1") == ["expired", "paged the on-call lead"]
    assert fallbacks == [1]  # the replay took the same branch without running it again


def test_on_timeout_cancel_raises_cancelled_latched_at_the_next_position(
    engine: durably.Engine, clock: durably.FakeClock
) -> None:
    seen: list[str] = []
    ran: list[str] = []

    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> Any:
        try:
            ctx.request_approval("refund", ARGS, timeout_s=60, on_timeout="cancel")
        except durably.Cancelled as exc:
            seen.append(f"{exc.reason}")
        try:
            ctx.step("after", lambda: ran.append("after"))  # refused: the cancel is latched
        except durably.Cancelled:
            seen.append("again")
        return "never"

    with pytest.raises(durably.RunParked):
        engine.run(wf, run_id="r1")
    clock.advance(60)
    with pytest.raises(durably.Cancelled, match="approval 'refund' expired"):
        engine.resume("r1")
    assert seen == ["approval 'refund' expired", "again"] and ran == []
    run = engine.get_run("r1")
    assert run.status == "cancelled" and run.error_message == "approval 'refund' expired"
    with pytest.raises(durably.Cancelled):
        engine.resume("r1")  # the recorded outcome, nothing runs again
    history = engine.history("r1")
    assert [(r.position, r.kind, r.name) for r in history] == [
        ("0", "approval", "request_approval:refund"),
        ("1", "halt", "durably.cancel"),
    ]
    assert json.loads(history[0].output or "")["outcome"] == "expired"


def test_async_workflow_approval(journal_url: str) -> None:
    clock = durably.FakeClock()
    with durably.Engine(journal_url, clock=clock, park_wait_s=0) as engine:

        async def fallback() -> str:
            return "fallback"

        @engine.workflow(name="awf")
        async def awf(ctx: durably.AsyncContext, amount: int) -> Any:
            first = await ctx.request_approval("refund", {"amount": amount})
            second = await ctx.request_approval(
                "close", {"id": 1}, timeout_s=5, on_timeout=fallback
            )
            return [first.outcome, first.by, second.outcome, second.value]

        with pytest.raises(durably.RunParked):
            engine.run(awf, 5, run_id="a1")
        [p] = engine.pending_approvals()
        assert p.digest == client_digest("refund", {"amount": 5})
        engine.approve("a1", p.request_id, digest=p.digest, by="ana")
        with pytest.raises(durably.RunParked):
            engine.run(awf, 5, run_id="a1")
        clock.advance(5)
        assert engine.run(awf, 5, run_id="a1") == ["approved", "ana", "expired", "fallback"]


def test_a_decision_wakes_engine_run_waiting_in_process(journal_url: str) -> None:
    # Real time: engine.run waits in this process (no park_wait_s); another thread (any
    # process) approves, and the run finishes long before any timeout.
    with durably.Engine(journal_url) as engine:

        @engine.workflow(name="wf")
        def wf(ctx: durably.Context) -> str:
            return ctx.request_approval("deploy", {"env": "prod"}).outcome

        result: list[Any] = []
        t = threading.Thread(target=lambda: result.append(engine.run(wf, run_id="w1")))
        t.start()
        deadline = time.monotonic() + 20
        while not engine.pending_approvals():
            assert time.monotonic() < deadline
            time.sleep(0.01)
        approved_at = time.monotonic()
        engine.approve("w1", "0", digest=client_digest("deploy", {"env": "prod"}))
        t.join(timeout=20)
        assert result == ["approved"]
        assert time.monotonic() - approved_at < 5  # SQLite polls each second; PG is NOTIFYed


def test_args_that_no_client_could_digest_block_the_run(engine: durably.Engine) -> None:
    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> Any:
        return ctx.request_approval("refund", {"when": (1, 2)})

    with pytest.raises(durably.ConfigError, match="plain JSON data"):
        engine.run(wf, run_id="b1")
    assert engine.get_run("b1").status == "blocked"


def test_bad_on_timeout_blocks_the_run(engine: durably.Engine) -> None:
    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> Any:
        return ctx.request_approval("refund", {}, on_timeout="escalate")

    with pytest.raises(durably.ConfigError, match="on_timeout must be"):
        engine.run(wf, run_id="b2")
    assert engine.get_run("b2").status == "blocked"


def test_changed_arguments_under_a_waiting_request_are_nondeterminism(
    engine: durably.Engine,
) -> None:
    amount = [20]

    @engine.workflow(name="wf")
    def wf(ctx: durably.Context) -> Any:
        return ctx.request_approval("refund", {"amount": amount[0]}).outcome

    with pytest.raises(durably.RunParked):
        engine.run(wf, run_id="n1")
    amount[0] = 2000  # a deploy that changes what is asked: never approved silently
    engine.approve("n1", "0", digest=client_digest("refund", {"amount": 20}))
    with pytest.raises(durably.NonDeterminism, match="history has 'request_approval:refund'"):
        engine.run(wf, run_id="n1")
    assert engine.get_run("n1").status == "blocked"


def test_async_request_never_awaited_blocks_the_run(engine: durably.Engine) -> None:
    @engine.workflow(name="awf")
    async def awf(ctx: durably.AsyncContext) -> None:
        ctx.request_approval("refund", {})  # type: ignore[unused-coroutine]

    with pytest.raises(durably.ConfigError, match="never awaited"):
        asyncio.run(engine.run_async(awf, run_id="d1"))
    assert engine.get_run("d1").status == "blocked"


def test_a_worker_frees_its_slot_and_resumes_the_run_once_approved(
    engine: durably.Engine,
) -> None:
    from durably.worker import Worker

    wf, calls = refund_flow(engine)
    handle = engine.start(wf, ARGS, run_id="w1")
    first = Worker(engine, poll_interval_s=0.01).run(max_runs=1)
    assert first.other["parked"] == 1 and engine.get_run("w1").status == "parked"
    # Nothing is due: a worker finds no work while the request waits.
    assert Worker(engine, poll_interval_s=0.01)._claim() is None
    engine.approve("w1", "1", digest=client_digest("refund", ARGS), by="ana")
    second = Worker(engine, poll_interval_s=0.01).run(max_runs=1)
    assert second.completed == 1 and calls == ["pay"]
    assert handle.result(timeout_s=1)["by"] == "ana"


def test_a_request_in_a_gather_branch_has_the_branch_position_as_its_id(
    engine: durably.Engine,
) -> None:
    @engine.workflow(name="awf")
    async def awf(ctx: durably.AsyncContext) -> Any:
        ctx.emit("start")
        got = await ctx.gather(
            ctx.step("lookup", lambda: "order"),
            ctx.request_approval("refund", {"n": 1}),
        )
        return [got[0], got[1].outcome]

    with pytest.raises(durably.RunParked):
        asyncio.run(engine.run_async(awf, run_id="g1"))
    [p] = engine.pending_approvals()
    assert p.request_id == "0.1.0"
    engine.approve("g1", "0.1.0", digest=p.digest)
    assert asyncio.run(engine.run_async(awf, run_id="g1")) == ["order", "approved"]


def test_a_damaged_decision_record_blocks_the_run(tmp_path: Any) -> None:
    import sqlite3

    url = f"sqlite:///{tmp_path / 'j.db'}"
    with durably.Engine(url, park_wait_s=0) as engine:

        @engine.workflow(name="wf")
        def wf(ctx: durably.Context) -> Any:
            first = ctx.request_approval("a", {})
            return [first.outcome, ctx.request_approval("b", {}).outcome]

        with pytest.raises(durably.RunParked):
            engine.run(wf, run_id="x")
        engine.approve("x", "0", digest=client_digest("a", {}))
        with pytest.raises(durably.RunParked):
            engine.resume("x")  # records the first decision, parks on the second
        with sqlite3.connect(tmp_path / "j.db") as db:
            db.execute("UPDATE steps SET output = '{\"outcome\":\"maybe\"}' WHERE position = '0'")
        engine.approve("x", "1", digest=client_digest("b", {}))
        with pytest.raises(durably.SerializationError, match="recorded decision cannot be read"):
            engine.resume("x")
        assert engine.get_run("x").status == "blocked"


def test_bad_by_or_note_is_refused_before_anything_is_written(engine: durably.Engine) -> None:
    wf, _ = refund_flow(engine)
    park(engine, wf)
    digest = client_digest("refund", ARGS)
    with pytest.raises(durably.ConfigError, match="NUL"):
        engine.approve("r1", "1", digest=digest, note="a\x00b")
    with pytest.raises(durably.ConfigError, match="must be a str"):
        engine.reject("r1", "1", digest=digest, by=42)  # type: ignore[arg-type]
    assert engine.pending_approvals()[0].digest == digest  # still undecided


def test_an_expiry_that_cancels_inside_a_saga_compensates_then_ends_cancelled(
    engine: durably.Engine, clock: durably.FakeClock
) -> None:
    undone: list[str] = []

    @engine.workflow(name="trip")
    def trip(ctx: durably.Context) -> Any:
        with ctx.saga() as saga:
            saga.step("hold_seat", lambda: "seat", lambda: undone.append("seat"))
            ctx.request_approval("book", {"seat": "12A"}, timeout_s=60, on_timeout="cancel")
            saga.step("pay", lambda: "paid", lambda: undone.append("pay"))
        return "booked"

    with pytest.raises(durably.RunParked):
        engine.run(trip, run_id="t1")
    clock.advance(60)
    with pytest.raises(durably.Cancelled):
        engine.resume("t1")
    assert undone == ["seat"] and engine.get_run("t1").status == "cancelled"


def test_a_waiting_request_with_no_time_blocks_the_run(tmp_path: Any) -> None:
    import sqlite3

    url = f"sqlite:///{tmp_path / 'j.db'}"
    with durably.Engine(url, park_wait_s=0) as engine:

        @engine.workflow(name="wf")
        def wf(ctx: durably.Context) -> Any:
            return ctx.request_approval("a", {}, timeout_s=60).outcome

        with pytest.raises(durably.RunParked):
            engine.run(wf, run_id="x")
        with sqlite3.connect(tmp_path / "j.db") as db:  # a hand edit: past year 9999
            output = '{"requested_at": 1, "expires_at": 1e300}'
            db.execute("UPDATE steps SET output = ? WHERE position = '0'", (output,))
            db.execute("UPDATE runs SET wake_at = 0")
        with pytest.raises(durably.SerializationError, match="recorded request cannot be read"):
            engine.resume("x")
        assert engine.get_run("x").status == "blocked"
