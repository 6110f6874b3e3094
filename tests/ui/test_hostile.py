"""The dashboard against a hostile browser neighbourhood, on a real uvicorn server: a
page of another port of localhost (same site, so it sends the SameSite=Strict session
and can set the CSRF cookie, which cookies do not scope by port), and addresses that a
browser reads as another site although they start with one slash."""

from __future__ import annotations

import html
import re

import httpx
import pytest

import durably

from .conftest import Served, pending_digest


def _cookies(served: Served, csrf: str) -> str:
    session = served.client.cookies.get("durably_ui_session")
    return f"durably_ui_session={session}; durably_ui_csrf={csrf}"


def test_a_same_site_page_that_sets_the_csrf_cookie_cannot_decide(served: Served) -> None:
    # What a page on http://localhost:3000 can do: set durably_ui_csrf for localhost
    # (cookies ignore ports) and post a form carrying the same value; the browser adds
    # the session cookie, because another port is the same site.
    request_id, digest = pending_digest(served.engine, "refund-1")
    form = {"run_id": "refund-1", "request_id": request_id, "digest": digest, "csrf": "tossed"}
    for headers in (
        {"Origin": "http://localhost:3000", "Sec-Fetch-Site": "same-site"},
        {"Origin": "http://localhost:3000"},
        {"Sec-Fetch-Site": "same-site"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Origin": "null"},
    ):
        with httpx.Client(base_url=served.url) as c:
            r = c.post(
                "/actions/approve",
                data=form,
                headers={"Cookie": _cookies(served, "tossed"), **headers},
            )
        assert r.status_code == 403, headers
        assert "another site" in r.text
    assert served.engine.pending_approvals("refund-1") != []
    # The dashboard's own page still decides (its Origin is the server's).
    with httpx.Client(base_url=served.url) as c:
        r = c.post(
            "/actions/approve",
            data={**form, "csrf": served.csrf()},
            headers={
                "Cookie": _cookies(served, served.csrf()),
                "Origin": served.url,
                "Sec-Fetch-Site": "same-origin",
            },
        )
    assert r.status_code == 200, r.text
    assert served.engine.pending_approvals("refund-1") == []


def _as_a_browser_reads_it(url: str) -> str:
    # The URL parser drops tabs and newlines anywhere and reads "\" as "/" in http URLs.
    return re.sub(r"[\t\n\r]", "", url).replace("\\", "/")


def test_the_login_reload_never_leaves_the_site_through_a_backslash_or_a_tab(
    served: Served,
) -> None:
    token = served.security.login_token
    for path in ("/%5Cevil.example/x", "/%09/evil.example/x", "/%5C%5Cevil.example", "/%0A/evil"):
        with httpx.Client() as fresh:
            r = fresh.get(f"{served.url}{path}?token={token}")
        assert r.status_code == 200, path
        m = re.search(r'content="0;url=([^"]*)"', r.text)
        assert m, r.text
        target = _as_a_browser_reads_it(html.unescape(m.group(1)))
        assert target.startswith("/") and not target.startswith("//"), (path, target)


def test_an_event_cursor_past_64_bits_is_refused_clearly(served: Served) -> None:
    huge = 2**63  # one past the journal's BIGINT cursors
    with pytest.raises(durably.ConfigError, match="event cursor"):
        served.engine.events("refund-1", after=huge)
    with pytest.raises(durably.ConfigError, match="event cursor"):
        served.engine.follow("refund-1", after=huge)
    for how in ({"params": {"after": str(huge)}}, {"headers": {"Last-Event-ID": str(huge)}}):
        r = served.client.get(
            "/run/events",
            params={"id": "refund-1", **how.get("params", {})},
            headers=how.get("headers"),
            timeout=10,
        )
        assert r.status_code == 400, (how, r.text)
        assert "cursor" in r.text
    # The server is fine afterwards (the connection was not torn down by a 500).
    assert served.client.get("/run?id=refund-1").status_code == 200
    assert served.engine.events("refund-1", after=2**63 - 1).events == []


def test_the_live_routes_answer_errors_as_plain_text_never_sniffed(served: Served) -> None:
    # The run id is reflected in the message; without a type a browser may sniff it.
    hostile = "<html><script>alert(1)</script>"
    for path, params in (
        ("/run/live", {"id": hostile}),
        ("/run/events", {"id": hostile}),
        ("/run/events", {"id": "refund-1", "after": "x"}),
        ("/run/events", {"id": "refund-1", "after": str(2**63)}),
    ):
        r = served.client.get(path, params=params)
        assert r.status_code in (400, 404), (path, params)
        assert r.headers["content-type"].startswith("text/plain"), (path, params)
        assert r.headers.get("x-content-type-options") == "nosniff", (path, params)


def test_the_host_header_is_one_bound_name_and_an_optional_port(served: Served) -> None:
    port = served.url.rsplit(":", 1)[1]
    for host in (
        f"[::1]evil.example:{port}",
        "[::1]evil.example",
        f"[::1]:{port}:x",
        f"localhost.:{port}",
        f"127.0.0.1:{port}@evil.example",
        "[::1",
    ):
        r = served.client.get("/runs", headers={"Host": host})
        assert r.status_code == 403, host
    for host in (f"LOCALHOST:{port}", "localhost", f"[::1]:{port}", "[::1]"):
        assert served.client.get("/runs", headers={"Host": host}).status_code == 200, host


ODD_MODEL_OUTPUTS = [
    {"object": "chat.completion", "choices": [{"message": {"content": "x", "tool_calls": 5}}]},
    {"object": "chat.completion", "choices": [{"message": {"tool_calls": [{"function": "f"}]}}]},
    {"object": "response", "output": [{"type": "message", "content": 5}]},
    {"object": "chat.completion", "choices": [{"message": {"content": "[" * 400 + "]" * 400}}]},
]


def test_a_run_whose_model_calls_recorded_odd_shapes_still_has_its_page(
    served: Served,
) -> None:
    # What a gateway answering outside the provider's format leaves in the journal: the
    # page shows the steps as values, never a 500.
    engine = served.engine
    outputs = iter(ODD_MODEL_OUTPUTS)

    @engine.workflow(name="odd")
    def odd(ctx: durably.Context) -> str:
        for i in range(len(ODD_MODEL_OUTPUTS)):
            value = next(outputs)
            if isinstance(value, str):
                ctx.step(f"openai.raw{i}", lambda v=value: __import__("json").loads(v))
            else:
                ctx.step(f"openai.chat{i}", lambda v=value: v)
        return "done"

    assert engine.run("odd", run_id="odd-1") == "done"
    for path in ("/run?id=odd-1", "/run/live?id=odd-1"):
        r = served.client.get(path)
        assert r.status_code == 200, (path, r.text[:300])
