"""Real Chromium (Debian's package) driven by Playwright, against real `shep ui` processes.

Playwright's own browser download is not reachable here: the browser is the
``chromium`` package, launched by path. Without it these tests skip, unless
``SHEP_REQUIRE_BROWSER`` is set (CI sets it), where they fail instead.

Screenshots of each page are written into ``docs/ui/`` when
``SHEP_WRITE_SCREENSHOTS=1`` (how docs/ui.md's images are made); otherwise
into the test's own directory, so a test run leaves the checkout as it was.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.shep.runs.conftest import agent_log, fake_claude, repo

__all__ = ["agent_log", "fake_claude", "repo"]

ROOT = Path(__file__).resolve().parents[4]
REQUIRE_ENV = "SHEP_REQUIRE_BROWSER"
SCREENSHOTS_ENV = "SHEP_WRITE_SCREENSHOTS"
CHROMIUM = os.environ.get("SHEP_CHROMIUM", "/usr/bin/chromium")
ARGS = [
    "--no-sandbox",  # the tests run as root in CI
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]


def _missing(why: str) -> None:
    if os.environ.get(REQUIRE_ENV):
        pytest.fail(f"a browser is required here ({REQUIRE_ENV}) but {why}")
    pytest.skip(why)


@pytest.fixture(scope="package")
def browser() -> Iterator[Any]:
    """Debian's Chromium, headless, for the browser tests: stopped once they are done, since
    Playwright's sync API keeps an asyncio loop running in this thread while it lives (a later
    test running prompt-toolkit, which starts a loop of its own, would fail)."""
    if not (os.path.exists(CHROMIUM) or shutil.which(CHROMIUM)):
        _missing(f"{CHROMIUM} is not installed (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("playwright is not installed (pip install -e '.[dev]')")
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield launched
        finally:
            launched.close()


class Watched:
    """A page, and every dialog and script error it had (an injected script would show
    up in one of them)."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.dialogs: list[str] = []
        self.errors: list[str] = []
        page.on("dialog", self._dialog)
        page.on("pageerror", lambda e: self.errors.append(str(e)))
        page.on("console", self._console)

    def _dialog(self, dialog: Any) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def _console(self, message: Any) -> None:
        if message.type == "error":
            self.errors.append(message.text)


@pytest.fixture
def page(browser: Any) -> Iterator[Watched]:
    """A page of its own browser context (its own cookies), laptop-sized."""
    context = browser.new_context(viewport={"width": 1200, "height": 900})
    try:
        yield Watched(context.new_page())
    finally:
        context.close()


@pytest.fixture
def test_workflows(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers (and the server) register tests/support/workflows.py's workflows."""
    monkeypatch.setenv("SHEP_WORKFLOW_MODULES", "tests.support.workflows")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))


def screenshot(page: Any, name: str, tmp_path: Path, *, full_page: bool = True) -> Path:
    """``name``.png into docs/ui/ (with SHEP_WRITE_SCREENSHOTS=1) or the test's directory."""
    folder = ROOT / "docs" / "ui" if os.environ.get(SCREENSHOTS_ENV) == "1" else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    return path
