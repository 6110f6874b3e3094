"""The dashboard's plain forms (signal, cancel, retry, fork: posted as a navigation, not
by the page's script) work in a real Chromium, whose Origin header for them follows the
page's Referrer-Policy; and a page of another port of localhost still cannot post."""

from __future__ import annotations

from .conftest import Served
from .test_browser import ARGS, CHROMIUM, pytestmark  # noqa: F401  (the skip condition)


def test_a_plain_form_post_from_the_dashboard_page_is_accepted(served: Served) -> None:
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            page = browser.new_page()
            page.goto(f"{served.url}/runs?token={served.security.login_token}")
            expect(page.locator("h1")).to_have_text("Runs")  # the login page reloaded
            page.goto(f"{served.url}/run?id=wait-1")
            page.fill("form[action='/actions/signal'] input[name='name']", "go")
            page.click("form[action='/actions/signal'] button")
            page.wait_for_load_state()
            assert page.url.endswith("/actions/signal")
            assert "Sent signal 'go' to run wait-1" in page.inner_text("#result")
        finally:
            browser.close()


def test_approving_from_the_approvals_page_works_in_a_real_browser(served: Served) -> None:
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            page = browser.new_page()
            page.goto(f"{served.url}/runs?token={served.security.login_token}")
            expect(page.locator("h1")).to_have_text("Runs")
            page.goto(f"{served.url}/approvals")
            page.click("section.approval button.approve")
            page.wait_for_load_state()
            assert "Approved request" in page.inner_text("#result")
        finally:
            browser.close()
    assert served.engine.pending_approvals("refund-1") == []
