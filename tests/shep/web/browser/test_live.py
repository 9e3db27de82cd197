"""Pages that change while you look: a run started from the CLI appears and ends on an open
page without reload; what an agent wrote, however hostile, is shown as text and runs nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.shep.web.browser.conftest import Watched
from tests.shep.web.ui_server import UiServer
from tests.support.cli import shep

#: What an agent might write to take over a page: a script, an event handler, a link,
#: a right-to-left override hiding what follows, an escape sequence.
HOSTILE = (
    '\n<script>window.__pwned = "script"</script>'
    "<img src=x onerror=\"window.__pwned='img'\">"
    '<a href="javascript:window.__pwned=\'link\'" id="evil-link">click</a>'
    "\u202eevil\u202c \x1b[31mred"
)


def _no_reload_marker(page: Any) -> None:
    page.evaluate("window.__sameDocument = 42")


def _still_same_document(page: Any) -> bool:
    return bool(page.evaluate("window.__sameDocument === 42"))


@pytest.mark.slow
def test_a_run_started_from_the_cli_appears_and_completes_without_reload(
    page: Watched, fake_claude: Path, repo: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The runs page is open on an empty home; `shep run --background` starts a run: its row
    appears, shows it running, then completed; its own page, opened meanwhile, fills its
    graph and output as the run goes, all in the same document (no reload)."""
    monkeypatch.setenv("FAKE_DELAY", "0.6")
    server = UiServer.start()
    try:
        runs, tab = page.page, page.page.context.new_page()
        runs.goto(server.url)
        runs.wait_for_selector("#live.on")
        assert "No runs yet" in runs.inner_text("#runs-rows")
        _no_reload_marker(runs)
        run_id = shep(
            "run", "analyze-repository", "--repo", str(repo), "--background", check=True
        ).stdout.strip()
        row = f"#run-{run_id}"
        runs.wait_for_selector(row, timeout=20_000)
        expect(runs.locator(f"{row} .badge")).to_have_text("running", timeout=20_000)
        tab.goto(f"{server.base}/runs/{run_id}")
        tab.wait_for_selector("#live.on")
        _no_reload_marker(tab)
        expect(runs.locator(f"{row} .badge")).to_have_text("completed", timeout=30_000)
        assert _still_same_document(runs)
        assert runs.inner_text(f"{row} td:nth-child(6)") == "4/4"
        expect(tab.locator("#run-status")).to_have_text("completed", timeout=20_000)
        assert _still_same_document(tab)
        for node in ("scan", "dependencies", "patterns", "report"):
            assert tab.get_attribute(f'g[data-node="{node}"]', "class").endswith("state-completed")
        log = tab.inner_text("#log")
        assert "Findings of step patterns: line one." in log
        assert "run.completed" in log
        assert page.errors == []
    finally:
        server.stop()


@pytest.mark.slow
def test_hostile_agent_output_renders_inert(
    page: Watched, fake_claude: Path, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent writes a script, an image with an onerror handler, a javascript: link and a
    bidi override into its output. Streamed into the open run page and rendered again on
    reload, and in the replay: nothing runs (the flag stays unset, no dialog, no script
    error), no element is made of it, and the text shows as written, the override as an
    escape."""
    monkeypatch.setenv("FAKE_DELAY", "0.5")
    monkeypatch.setenv("FAKE_SUFFIX", HOSTILE)
    server = UiServer.start()
    try:
        tab = page.page
        tab.goto(server.url)
        tab.wait_for_selector("#live.on")
        run_id = shep(
            "run", "analyze-repository", "--repo", str(repo), "--background", check=True
        ).stdout.strip()
        tab.goto(f"{server.base}/runs/{run_id}")
        expect(tab.locator("#run-status")).to_have_text("completed", timeout=30_000)
        for where in ("streamed", "rendered", "replay"):
            if where == "rendered":
                tab.reload()
            elif where == "replay":
                tab.goto(f"{server.base}/runs/{run_id}/replay?frame=3")
            tab.wait_for_timeout(300)
            assert tab.evaluate("window.__pwned") is None, where
            area = "#log" if where != "replay" else "#frame"
            assert tab.query_selector_all(f"{area} img, {area} script, {area} a#evil-link") == []
            text = tab.inner_text(area)
            assert '<script>window.__pwned = "script"</script>' in text, where
            assert "onerror=\"window.__pwned='img'\"" in text
            assert "\\u202eevil\\u202c" in text
            assert "\u202e" not in text
            assert "\\x1b[31mred" in text
        assert page.dialogs == []
        assert page.errors == []
    finally:
        server.stop()


@pytest.mark.slow
def test_the_run_page_streams_output_appended_to_the_log(
    page: Watched, store: Any, tmp_path: Path
) -> None:
    """Agent output appended to the store (as a worker appends it) shows on the open run
    page in order, once each, and a page that reconnects gets what it missed."""
    import os
    from uuid import UUID

    from commands.create_run import create_run
    from commands.record_agent_output import OutputItem, record_agent_output
    from commands.start_run import start_run

    run = create_run(
        store, workflow="bench", agent_type="demo", repo="/r", node_names=["a"], created_by="t"
    )
    start_run(store, run, pid=os.getpid(), host="here")
    server = UiServer.start()
    try:
        tab = page.page
        tab.goto(server.url)
        tab.goto(f"{server.base}/runs/{run.hex}")
        tab.wait_for_selector("#live.on")
        for n in range(20):
            record_agent_output(store, UUID(run.hex), "a", [OutputItem(kind="text", text=f"m{n}")])
        expect(tab.locator("#log li")).to_have_count(22, timeout=20_000)
        shown = [
            t for t in tab.eval_on_selector_all("#log li .text", "e => e.map(x => x.textContent)")
        ]
        assert shown[-20:] == [f"m{n}" for n in range(20)]
        positions = tab.eval_on_selector_all("#log li", "e => e.map(x => Number(x.dataset.p))")
        assert positions == sorted(set(positions))
    finally:
        server.stop()
    assert json.dumps(page.errors) == "[]"
