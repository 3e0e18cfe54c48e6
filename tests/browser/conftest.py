"""Playwright (sync API) driving Debian's Chromium against a live Marina: the
real ASGI app under uvicorn (tests/conftest.py's `marina_url`). Playwright
cannot download its own browser here, so `apt-get install chromium` it is."""
from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, Playwright, Request, Response, sync_playwright

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
SCREENSHOTS = Path(__file__).resolve().parents[2] / "artifacts" / "screenshots"
ADMIN_PASSWORD = "browser-test-password-1"


@pytest.fixture(autouse=True)
def _allow_orm_beside_playwright(monkeypatch: pytest.MonkeyPatch) -> None:
    # Playwright's sync API keeps an event loop on this thread; the test's own ORM
    # calls are still plain synchronous ones (pytest-django's advice for Playwright).
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    # Module scope: the loop goes away before any test outside tests/browser runs.
    if not shutil.which(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: apt-get update && apt-get install -y chromium")
    with sync_playwright() as p:
        yield p


@pytest.fixture(scope="module")
def browser(playwright: Playwright) -> Iterator[Browser]:
    browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    yield browser
    browser.close()


class PageProblems:
    """Console errors, uncaught exceptions and failed requests seen by a page."""

    def __init__(self, page: Page) -> None:
        self.seen: list[str] = []
        page.on("console", self._console)
        page.on("pageerror", lambda error: self.seen.append(f"page error: {error}"))
        page.on("requestfailed", self._failed)
        page.on("response", self._response)

    def _console(self, message: ConsoleMessage) -> None:
        if message.type in ("error", "warning"):
            self.seen.append(f"console {message.type}: {message.text} at {message.location}")

    def _failed(self, request: Request) -> None:
        # Chromium fetches the favicon after the page has loaded and aborts that
        # fetch when the test navigates on first: the browser's own cancellation,
        # not a failure of the page (a favicon that fails to load still shows up
        # as an HTTP error in _response).
        if request.failure == "net::ERR_ABORTED" and request.url.endswith("/favicon.svg"):
            return
        self.seen.append(f"request failed: {request.method} {request.url} ({request.failure})")

    def _response(self, response: Response) -> None:
        if response.status >= 400:
            self.seen.append(f"HTTP {response.status}: {response.request.method} {response.url}")


@pytest.fixture
def page(browser: Browser) -> Iterator[tuple[Page, PageProblems]]:
    context = browser.new_context(viewport={"width": 1366, "height": 900}, accept_downloads=True)
    page = context.new_page()
    page.set_default_timeout(15_000)
    problems = PageProblems(page)
    yield page, problems
    context.close()


def screenshot(page: Page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
