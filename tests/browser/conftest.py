"""Browser tests: Playwright (Python) driving Debian's Chromium against pytest-django's live
server. Playwright's own browser download cannot work here, so the browser is the system's
/usr/bin/chromium (`apt-get install -y chromium`); without it every test here fails, loudly.
Each test saves a screenshot to test-artifacts/ (gitignored)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.urls import reverse

# Playwright's sync API runs an event loop in this thread; the ORM calls the tests make
# between browser steps are still plain synchronous calls.
os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

CHROMIUM = Path(os.environ.get("COUNTERSIGN_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
PASSWORD = "a-long-test-password"  # what tests.factories.make_user gives everyone


# Per module, not per session: Playwright's loop runs in this thread while the browser is
# open, and the tests after the browser modules (the agent integrations) need asyncio.run.
@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():
        pytest.fail(
            f"{CHROMIUM} is missing, so the browser tests cannot run. Install Debian's "
            "Chromium: `apt-get update && apt-get install -y chromium`.",
            pytrace=False,
        )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser, live_server, request):
    context = browser.new_context(base_url=live_server.url, viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(15_000)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    yield page
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


def log_in(page, username: str, *, landing: str = "/inbox/") -> None:
    """Logs in and waits for the page the person's roles land on (an auditor's: /receipts/)."""
    page.goto(reverse("login"))
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"**{landing}")


def screenshot(page, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
