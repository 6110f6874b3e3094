"""A real browser on the dashboard: Debian's chromium driven by Playwright (never a
downloaded browser). It opens the runs list, opens a run parked on an approval (driven by
a real engine in a thread, waiting in-process), sees the action and its arguments,
clicks Approve, and watches the run complete on the page without a reload (SSE).

Set DURABLY_UI_SCREENSHOT=docs/ui.png to save the run page as docs/ui.md shows it.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

import durably
from durably.ui import security_for

from .conftest import CHAT, serve

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists() and os.environ.get("CI", "").lower() not in ("1", "true", "yes"),
    reason="needs Debian's chromium (apt-get install chromium; .ci/run installs it)",
)


def _workflows(engine: durably.Engine, refunded: list[int]) -> None:
    @engine.workflow(name="support", version="3")
    def support(ctx: durably.Context, order: int) -> dict[str, Any]:
        ctx.step("openai.chat.completions.create", lambda: CHAT)
        found = ctx.step("lookup_order", lambda: {"order": order, "paid_usd": 42.5})
        d = ctx.request_approval(
            "refund", {"order": order, "amount_usd": found["paid_usd"], "to": "card ****4242"}
        )
        if d.outcome != "approved":
            return {"refunded": False}
        ctx.step("refund", lambda: refunded.append(order) or {"refund_id": "re_1"})
        return {"refunded": True, "by": d.by}


def test_approve_in_the_browser_and_watch_the_run_complete(
    journal_url: str, tmp_path: Path
) -> None:
    from playwright.sync_api import expect, sync_playwright

    url = journal_url
    refunded: list[int] = []
    driver = durably.Engine(url)
    _workflows(driver, refunded)
    viewer = durably.Engine(url)
    for i in range(3):  # some history around it
        driver.start("support", 100 + i, run_id=f"older-{i}")
    outcome: dict[str, Any] = {}

    def drive() -> None:
        try:
            outcome["result"] = driver.run("support", 7, run_id="support-7")
        except BaseException as exc:  # reported by the assertion below
            outcome["error"] = exc

    worker = threading.Thread(target=drive, daemon=True)
    worker.start()
    security = security_for("127.0.0.1", env={}, user="ana")
    try:
        with serve(viewer, security) as base, sync_playwright() as pw:
            _wait_parked(viewer, "support-7")
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
            try:
                page = browser.new_page(viewport={"width": 1280, "height": 1000})
                page.goto(f"{base}/runs?token={security.login_token}")
                expect(page.locator("h1")).to_have_text("Runs")
                expect(page.locator("a.runid", has_text="support-7")).to_be_visible()
                page.click("a.runid >> text=support-7")
                expect(page.locator("#run-status")).to_have_text("parked", use_inner_text=False)
                card = page.locator("section.approval")
                expect(card.locator("code.action")).to_have_text("refund")
                args = card.locator("pre.args").inner_text()
                assert '"amount_usd": 42.5' in args and '"to": "card ****4242"' in args
                expect(page.locator("#live-state")).to_have_text("following live")
                expect(page.locator(".conversation")).to_contain_text("tool call · lookup_order")
                shot = os.environ.get("DURABLY_UI_SCREENSHOT")
                if shot:
                    page.screenshot(path=shot, full_page=True)
                page.evaluate("window.__sameDocument = true")
                card.locator("button.approve").click()
                expect(page.locator("#flash")).to_contain_text("Approved request")
                expect(page.locator("#run-status")).to_have_text(
                    "completed", use_inner_text=False, timeout=30_000
                )
                assert page.evaluate("window.__sameDocument") is True  # never reloaded
                expect(page.locator("section.timeline")).to_contain_text("refund")
                expect(page.locator("#live-state")).to_have_text("the run is finished")
                page.screenshot(path=str(tmp_path / "completed.png"), full_page=True)
            finally:
                browser.close()
        worker.join(30)
        assert outcome.get("result") == {"refunded": True, "by": "ana"}, outcome
        assert refunded == [7]
    finally:
        viewer.close()
        driver.close()


def _wait_parked(engine: durably.Engine, run_id: str) -> None:
    import time

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if engine.get_run(run_id).status == "parked":
                return
        except durably.RunNotFound:
            pass
        time.sleep(0.05)
    raise AssertionError(f"{run_id} did not park")
