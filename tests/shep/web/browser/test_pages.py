"""Every page on a real feature, from its first question to its merge, at a laptop's and a
phone's width, light and dark: what docs/ui.md shows is these screenshots."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from shep.demo import SAMPLE_REPO
from shep.git.command import run_git
from tests.shep.web.browser.conftest import Watched, screenshot
from tests.shep.web.ui_server import UiServer
from tests.support.cli import shep

FEATURE = "Add a low-stock report listing items below their reorder level"
PHONE = {"width": 390, "height": 844}


def _sample_repo(root: Path) -> Path:
    repo = root / "inventory"
    shutil.copytree(SAMPLE_REPO, repo, ignore=shutil.ignore_patterns("__pycache__"))
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@localhost"}
    env |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@localhost"}
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "Inventory"]):
        run_git(repo, *args, env=env, doing="make the test repository")
    return repo


def _pending(run: str) -> list[dict[str, Any]]:
    items = json.loads(shep("inbox", "--json", check=True).stdout)
    return [i for i in items if i["run_id"] == run]


def _visit(page: Watched, url: str, name: str, tmp_path: Path, *, whole: bool = True) -> None:
    page.page.goto(url)
    expect(page.page.locator("#live")).to_have_class("live on", timeout=10_000)
    screenshot(page.page, name, tmp_path, full_page=whole)


@pytest.mark.slow
def test_every_page_of_a_feature_renders_live_at_both_widths(
    page: Watched, browser: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A feature taken from its question through three gates to its merge with the demo
    agent: runs, the run (its graph and timeline), the inbox with a question and with each
    kind of approval (a spec file, a plan, the diff to merge and the test result),
    the feature, replay, audit (verified) and the supervisor render without a script
    error; the phone width and dark mode too."""
    monkeypatch.setenv("SHEP_DEMO_DELAY", "0")
    shep("settings", "agent", "--agent", "demo", check=True)
    repo = _sample_repo(tmp_path)
    shep("feat", "new", FEATURE, "--repo", str(repo), check=True)
    run = json.loads(shep("status", "--json", check=True).stdout)[0]["run_id"]
    server = UiServer.start()
    try:
        tab = page.page
        tab.goto(server.url)
        _visit(page, server.base + "/", "runs", tmp_path)
        _visit(page, f"{server.base}/runs/{run}", "run-waiting", tmp_path, whole=False)
        assert tab.get_attribute('g[data-node="clarify"]', "class").endswith("state-waiting")
        _visit(page, server.base + "/inbox", "inbox-question", tmp_path)
        for name, path in (("runs", "/"), ("inbox", "/inbox"), ("run", f"/runs/{run}")):
            phone = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
            small = Watched(phone.new_page())
            small.page.goto(server.url)
            _visit(small, server.base + path, f"phone-{name}", tmp_path)
            width = small.page.evaluate("document.documentElement.scrollWidth")
            assert width <= PHONE["width"], (name, width)
            assert small.errors == []
            phone.close()
        question = tab.locator("section.item.kind-question.status-pending")
        question.locator("input[type=radio]").first.check()
        question.locator("button[type=submit]").click()
        gate = tab.locator("section.item.kind-approval.status-pending")
        expect(gate).to_have_count(1, timeout=60_000)
        expect(gate.locator("details.artifact pre").first).to_contain_text("open_questions")
        screenshot(tab, "inbox-approval", tmp_path)
        seen = {"prd"}
        for _ in range(10):
            items = _pending(run)
            if not items:
                break
            item = items[0]
            assert item["kind"] == "approval", item
            if item["node"] == "merge_gate":
                tab.goto(server.base + "/inbox")
                expect(tab.locator("details.kind-diff pre")).to_contain_text("diff --git")
                expect(tab.locator("details.kind-tests summary")).to_contain_text("passed")
                screenshot(tab, "inbox-merge", tmp_path)
            seen.add(item["node"])
            shep("approve", item["item_id"], "--wait", check=True)
        assert seen == {"prd", "plan_gate", "merge_gate"}
        _visit(page, f"{server.base}/runs/{run}", "run", tmp_path, whole=False)
        expect(tab.locator("#run-status")).to_have_text("completed")
        _visit(page, f"{server.base}/features/{run}", "feature", tmp_path)
        expect(tab.locator("pre.diff")).to_contain_text("diff --git")
        _visit(page, server.base + "/features", "features", tmp_path)
        _visit(page, f"{server.base}/runs/{run}/replay?frame=8", "replay", tmp_path)
        tab.locator("#scrubber").focus()
        tab.keyboard.press("ArrowRight")
        expect(tab.locator("#scrubber-at")).to_contain_text("9/")
        _visit(page, server.base + "/audit?verify=1", "audit", tmp_path)
        expect(tab.locator(".ok")).to_contain_text("events verify")
        _visit(page, f"{server.base}/supervisor?ref={run}", "supervisor", tmp_path)
        assert tab.locator("table tbody tr").count() >= 4
        dark = browser.new_context(viewport={"width": 1200, "height": 900}, color_scheme="dark")
        night = Watched(dark.new_page())
        night.page.goto(server.url)
        _visit(night, f"{server.base}/runs/{run}", "run-dark", tmp_path, whole=False)
        background = night.page.evaluate("getComputedStyle(document.body).backgroundColor")
        assert background == "rgb(20, 21, 23)"
        dark.close()
        assert page.errors == []
        assert page.dialogs == []
    finally:
        code, _, err = server.stop()
    assert code == 0
    assert "Exception" not in err, err
