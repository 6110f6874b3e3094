"""Every page and button of the dashboard on both stores, through a real server."""

from __future__ import annotations

import html
from typing import Any

import pytest

import durably

from .conftest import Served, pending_digest, sse_messages


def test_runs_page_lists_every_run_with_counts(served: Served) -> None:
    r = served.client.get("/runs")
    assert r.status_code == 200
    for run_id in ("refund-1", "wait-1", "agent-1", "boom-1", "queued-1"):
        assert f">{run_id}</a>" in r.text
    assert 'class="count-parked">2<' in r.text
    assert 'class="count-completed">1<' in r.text
    assert 'class="count-failed">1<' in r.text
    assert 'class="count-queued">1<' in r.text
    assert "all <b>5</b>" in r.text


@pytest.mark.parametrize(
    ("query", "shown", "hidden"),
    [
        ("status=parked", {"refund-1", "wait-1"}, {"agent-1", "boom-1", "queued-1"}),
        ("workflow=refund", {"refund-1"}, {"wait-1", "agent-1"}),
        ("version=2", {"refund-1"}, {"wait-1", "agent-1"}),
        ("queue=slow", {"queued-1"}, {"agent-1", "refund-1"}),
        ("q=oom", {"boom-1"}, {"agent-1", "refund-1"}),
    ],
)
def test_runs_page_filters(served: Served, query: str, shown: set[str], hidden: set[str]) -> None:
    r = served.client.get(f"/runs?{query}")
    assert r.status_code == 200
    for run_id in shown:
        assert f">{run_id}</a>" in r.text
    for run_id in hidden:
        assert f">{run_id}</a>" not in r.text


def test_runs_page_refuses_an_unknown_status(served: Served) -> None:
    r = served.client.get("/runs?status=sleeping")
    assert r.status_code == 400
    assert "there is no run status" in r.text and "Traceback" not in r.text


def test_runs_page_pages_with_the_cursor_and_never_truncates_ids(served: Served) -> None:
    long_id = "run-" + "x" * 120
    for i in range(60):
        served.engine.start("agent", run_id=f"many-{i:03d}")
    served.engine.start("agent", run_id=long_id)
    seen: list[str] = []
    url: str | None = "/runs?q=-"
    pages = 0
    while url is not None:
        r = served.client.get(url)
        assert r.status_code == 200
        pages += 1
        import re

        seen += re.findall(r'class="runid" href="[^"]*">([^<]+)</a>', r.text)
        m = re.search(r'id="next" href="([^"]+)"', r.text)
        url = html.unescape(m.group(1)) if m else None
    assert pages == 2
    assert len(seen) == len(set(seen))  # no repeat across pages
    assert set(seen) >= {f"many-{i:03d}" for i in range(60)} | {long_id}


def test_run_page_shows_header_timeline_and_conversation(served: Served) -> None:
    r = served.client.get("/run?id=agent-1")
    assert r.status_code == 200
    text = r.text
    assert "completed" in text and "agent" in text
    assert "15 tokens of 1,000 · $0.0020 of $0.5000" in text  # spend against budget
    assert "<td>15</td><td>$0.0020</td>" in text  # the step's tokens and cost
    assert 'class="why"' in text
    assert "openai.chat.completions.create" in text and "lookup_order" in text
    run = served.engine.get_run("agent-1")
    assert run.key("1") in text  # the full idempotency key
    # The model call read as a conversation: the assistant's text, its tool call with
    # arguments, and the tool step after it as the result.
    assert "I will look the order up." in text
    assert "tool call · lookup_order" in text
    assert "&#34;order&#34;: 7" in text
    assert "tool result · lookup_order" in text and "shipped" in text
    # A large value is folded.
    assert "<details><summary>" in text and "(5,000 characters)" in text


def test_run_page_of_a_failed_run_shows_the_error_escaped(served: Served) -> None:
    r = served.client.get("/run?id=boom-1")
    assert r.status_code == 200
    assert "ValueError: the &lt;b&gt;tool&lt;/b&gt; broke" in r.text
    assert "<b>tool</b>" not in r.text


def test_run_page_shows_the_pending_approval(served: Served) -> None:
    _, digest = pending_digest(served.engine, "refund-1")
    r = served.client.get("/run?id=refund-1")
    assert r.status_code == 200
    assert "Approval requested" in r.text and ">refund</code>" in r.text
    assert "&#34;amount&#34;: 20" in r.text
    assert "pay&lt;U+200B&gt;me" in r.text  # the invisible character made visible
    assert f'name="digest" value="{digest}"' in r.text
    assert "Approve</button>" in r.text and "Reject</button>" in r.text


def test_run_page_of_an_unknown_run_is_404(served: Served) -> None:
    r = served.client.get("/run?id=nope")
    assert r.status_code == 404
    assert "there is no run" in r.text and "Traceback" not in r.text
    assert served.client.get("/run").status_code == 400


def test_inbox_lists_waiting_runs_with_why_and_action(served: Served) -> None:
    r = served.client.get("/inbox")
    assert r.status_code == 200
    assert ">refund-1</a>" in r.text and ">wait-1</a>" in r.text
    assert ">agent-1</a>" not in r.text
    assert "Decide the approval" in r.text
    assert r.text.count('class="why"') == 2


def test_approvals_page_shows_action_args_digest(served: Served) -> None:
    _, digest = pending_digest(served.engine, "refund-1")
    r = served.client.get("/approvals")
    assert r.status_code == 200
    assert digest in r.text
    assert "invisible characters" in r.text and "U+200B" in r.text


def test_approve_posts_the_digest_and_records_the_user(served: Served) -> None:
    request_id, digest = pending_digest(served.engine, "refund-1")
    r = served.post(
        "approve", run_id="refund-1", request_id=request_id, digest=digest, by="mallory"
    )
    assert r.status_code == 200, r.text
    assert "Approved request" in r.text and 'href="/run?id=refund-1"' in r.text
    assert served.engine.pending_approvals("refund-1") == []
    out = served.engine.resume("refund-1")
    assert out == {"outcome": "approved", "by": "tester"}  # never the form's "by"


def test_reject_and_a_stale_digest(served: Served) -> None:
    request_id, digest = pending_digest(served.engine, "refund-1")
    bad = served.post("approve", run_id="refund-1", request_id=request_id, digest="0" * 64)
    assert bad.status_code == 409 and "ApprovalMismatch" in bad.text
    assert served.engine.pending_approvals("refund-1") != []
    r = served.post("reject", run_id="refund-1", request_id=request_id, digest=digest)
    assert r.status_code == 200 and "Rejected request" in r.text
    again = served.post("reject", run_id="refund-1", request_id=request_id, digest=digest)
    assert again.status_code == 409 and "not done" in again.text
    assert served.engine.resume("refund-1")["outcome"] == "rejected"


def test_signal_with_json_data_and_with_bad_json(served: Served) -> None:
    bad = served.post("signal", run_id="wait-1", name="go", data="{not json")
    assert bad.status_code == 400
    assert "not JSON" in bad.text and "Nothing was sent" in bad.text
    r = served.post("signal", run_id="wait-1", name="go", data='{"ok": true}')
    assert r.status_code == 200 and "its signal #1" in r.text
    assert served.engine.resume("wait-1") == {"ok": True}


def test_actions_on_an_unknown_run_say_so(served: Served) -> None:
    for action, fields in (
        ("signal", {"name": "go"}),
        ("cancel", {}),
        ("retry", {}),
        ("fork", {"at": "0"}),
    ):
        r = served.post(action, run_id="ghost", **fields)
        assert r.status_code == 404, (action, r.text)
        assert "RunNotFound" in r.text and "Traceback" not in r.text
    missing = served.post("signal", run_id="wait-1")
    assert missing.status_code == 400 and "the signal&#39;s name is missing" in missing.text


def test_cancel_retry_fork(served: Served) -> None:
    r = served.post("cancel", run_id="wait-1", reason="not needed")
    assert r.status_code == 200 and "cancel" in r.text
    assert served.engine.get_run("wait-1").cancel_requested_at is not None
    r = served.post("retry", run_id="boom-1")
    assert r.status_code == 200 and "queued again" in r.text
    assert served.engine.get_run("boom-1").status == "queued"
    bad = served.post("fork", run_id="agent-1", at="two")
    assert bad.status_code == 400 and "whole number" in bad.text
    r = served.post("fork", run_id="agent-1", at="1", new_run_id="agent-fork")
    assert r.status_code == 200 and "agent-fork" in r.text
    assert served.engine.get_run("agent-fork").status == "queued"


def test_events_stream_resumes_from_last_event_id(served: Served) -> None:
    full = served.client.get("/run/events?id=agent-1")
    assert full.status_code == 200
    assert full.headers["content-type"].startswith("text/event-stream")
    events = sse_messages(full.text)
    assert [e["id"] for e in events] == sorted(e["id"] for e in events)
    assert "event: end" in full.text  # a finished run's stream ends
    kinds = [e["kind"] for e in events]
    assert "run.completed" in kinds and "step.completed" in kinds
    middle = events[len(events) // 2]["id"]
    rest = served.client.get("/run/events?id=agent-1", headers={"Last-Event-ID": str(middle)})
    assert [e["id"] for e in sse_messages(rest.text)] == [
        e["id"] for e in events if e["id"] > middle
    ]
    assert served.client.get("/run/events?id=nope").status_code == 404
    assert served.client.get("/run/events?id=agent-1&after=x").status_code == 400


def test_live_fragment(served: Served) -> None:
    r = served.client.get("/run/live?id=refund-1")
    assert r.status_code == 200 and "Approval requested" in r.text
    assert "<html" not in r.text
    assert served.client.get("/run/live?id=nope").status_code == 404


def test_static_files_are_served(served: Served) -> None:
    assert "EventSource" in served.client.get("/static/ui.js").text
    assert served.client.get("/static/ui.css").status_code == 200


def test_journal_text_is_escaped(served: Served) -> None:
    engine = served.engine
    evil = '<script>alert("x")</script>'
    with pytest.raises(durably.RunParked):
        engine.run("refund", evil, run_id="xss-1")
    for path in ("/run?id=xss-1", "/approvals", "/runs"):
        r = served.client.get(path)
        assert r.status_code == 200
        assert "<script>alert" not in r.text


def test_events_stream_follows_a_1000_step_run_live(served: Served) -> None:
    import threading

    engine = durably.Engine(served.engine.url)
    started = threading.Event()

    @engine.workflow(name="long")
    def long(ctx: durably.Context) -> int:
        started.wait(10)
        for i in range(1000):
            ctx.step(f"s{i}", lambda i=i: i)
        return 1000

    engine.start("long", run_id="long-1")
    runner = threading.Thread(target=lambda: engine.resume("long-1"), daemon=True)
    runner.start()
    try:
        steps = 0
        with served.client.stream("GET", "/run/events?id=long-1") as r:
            assert r.status_code == 200
            started.set()  # the follower is attached before the run goes
            ended = False
            for line in r.iter_lines():
                if line.startswith("data: {") and '"kind":"step.completed"' in line:
                    steps += 1
                if line == "event: end":
                    ended = True
                    break
        assert ended and steps == 1000
        runner.join(60)
        assert engine.get_run("long-1").status == "completed"
    finally:
        engine.close()


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("after=not-a-cursor", "cursor"),
        ("q=" + "x" * 150, "search"),
    ],
)
def test_runs_page_bad_input_is_a_message(served: Served, query: str, says: str) -> None:
    r = served.client.get(f"/runs?{query}")
    assert r.status_code == 400
    assert "Cannot list runs" in r.text and says in r.text.lower()
    assert "Traceback" not in r.text


def test_fork_past_the_end_is_a_message(served: Served) -> None:
    r = served.post("fork", run_id="agent-1", at="99")
    assert r.status_code == 400
    assert "ConfigError" in r.text and "fork at 3 or earlier" in r.text


def test_a_blocked_run_is_in_the_inbox_and_retry_queues_it(served: Served) -> None:
    # The code changed under a parked run: its replay no longer matches, so it blocks.
    changed = durably.Engine(served.engine.url, park_wait_s=0)

    @changed.workflow(name="waiter")
    def waiter(ctx: durably.Context) -> Any:
        ctx.step("new_first_step", lambda: 1)
        return ctx.wait_for_signal("go", timeout_s=3600)

    try:
        changed.signal("wait-1", "go", 1)
        with pytest.raises(durably.DurablyError):
            changed.resume("wait-1")
        assert changed.get_run("wait-1").status == "blocked"
    finally:
        changed.close()
    r = served.client.get("/inbox")
    assert r.status_code == 200
    blocked = r.text.split("s-blocked")[1].split("s-in_doubt")[0]
    assert ">wait-1</a>" in blocked and "Fix the code" in blocked
    assert "new_first_step" in blocked or "history has" in blocked  # the why sentence
    r = served.post("retry", run_id="wait-1")
    assert r.status_code == 200 and "queued again" in r.text


def test_invisible_characters_in_names_are_shown(served: Served) -> None:
    @served.engine.workflow(name="pay\u2060out")
    def payout(ctx: durably.Context) -> int:
        return int(ctx.step("send\u200bmoney", lambda: 1))

    served.engine.run("pay\u2060out", run_id="payout-1")
    r = served.client.get("/runs")
    assert "<td>pay&lt;U+2060&gt;out</td>" in r.text and "pay\u2060out" not in r.text
    page = served.client.get("/run?id=payout-1")
    assert page.status_code == 200
    assert "<td>send&lt;U+200B&gt;money</td>" in page.text and "\u200b" not in page.text


def test_an_expired_request_says_it_can_no_longer_be_decided(served: Served) -> None:
    import time

    @served.engine.workflow(name="hasty")
    def hasty(ctx: durably.Context) -> str:
        return ctx.request_approval("deploy", {"env": "prod"}, timeout_s=1.0).outcome

    # A second to park in (0.05 s ran out before the park on a loaded machine, and the
    # run went on with the timeout's outcome instead of parking).
    with pytest.raises(durably.RunParked):
        served.engine.run("hasty", run_id="hasty-1")
    deadline = time.monotonic() + 30
    while True:
        r = served.client.get("/run?id=hasty-1")
        if "This request has expired" in r.text or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert "This request has expired" in r.text


def test_run_page_of_a_run_that_continued_as_new_shows_its_generations(served: Served) -> None:
    engine = served.engine

    @engine.workflow(name="gens")
    def gens(ctx: durably.Context, n: int) -> int:
        ctx.step("tick", lambda: n)
        if n < 2:
            return ctx.continue_as_new(n + 1)
        return n

    assert engine.run(gens, 0, run_id="gens-1") == 2
    text = served.client.get("/run?id=gens-1").text
    assert "continued as new; the journal below is this generation" in text
    assert "g0: continued" in text and "g1: continued" in text
    assert engine.get_run("gens-1").key("0") in text  # the current generation's key
    assert engine.get_run("gens-1").key("0").endswith(":g2.0")
