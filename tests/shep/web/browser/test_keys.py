"""The inbox's keys: `j`/`k` move between items, a digit picks a question's option, `a`
and `r` go to a gate's approve and reject fields, Escape goes back to the item. Keys
never decide alone: Enter submits what they picked, as a click would.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from events.store import EventStore
from shep.home.identity import user_actor
from tests.shep.web.browser.conftest import Watched
from tests.shep.web.ui_server import UiServer
from tests.support.cli import shep
from tests.support.store_items import ask_on_new_run, gate, question


def _focused(tab: Any) -> str:
    """The id of the item holding the focus (or '')."""
    return str(
        tab.evaluate(
            "() => { const s = document.activeElement && document.activeElement.closest"
            "('section.item'); return s ? s.id : ''; }"
        )
    )


@pytest.mark.slow
def test_a_question_answered_and_a_gate_rejected_with_the_keyboard(
    page: Watched, shep_home: Path, tmp_path: Path
) -> None:
    """On the inbox, with keys only: `j` to the question, `2` picks its second option,
    Enter answers; `j` to the gate, `r` to its reason, typed, Enter rejects. The log
    has both decisions, by this user, with that option and that reason."""
    shep_home.mkdir(mode=0o700)
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "shep-review.md").write_text("# Review\n")
    with EventStore(shep_home / "shep.db") as store:
        run, items = ask_on_new_run(
            store, tmp_path / "repo", [question("q1"), gate("g1")], resumed=True
        )
    asked, gated = (f"item-{i.hex}" for i in items)
    server = UiServer.start()
    try:
        tab = page.page
        tab.goto(server.url)
        tab.goto(f"{server.base}/inbox")
        expect(tab.locator("section.item")).to_have_count(2)
        tab.keyboard.press("j")
        if _focused(tab) != asked:
            tab.keyboard.press("j")
        assert _focused(tab) == asked
        tab.keyboard.press("2")
        expect(tab.locator(f"#{asked} input[value=large]")).to_be_checked()
        expect(tab.locator(f"#{asked} input[value=small]")).not_to_be_checked()
        tab.keyboard.press("Enter")
        me = user_actor(None)
        expect(tab.locator(f"#{asked} .decided")).to_contain_text(f"by {me}", timeout=20_000)

        tab.reload()  # the live refresh of the answered item may still be on its way
        expect(tab.locator(f"#{gated}")).to_have_count(1)
        for _ in range(3):
            tab.keyboard.press("j")
            if _focused(tab) == gated:
                break
        assert _focused(tab) == gated
        tab.keyboard.press("r")
        reason = tab.locator(f"#{gated} input[name=reason]")
        expect(reason).to_be_focused()
        tab.keyboard.type("Too vague.")
        tab.keyboard.press("Escape")  # back to the item, nothing sent
        assert _focused(tab) == gated
        expect(tab.locator(f"#{gated} form")).to_have_count(2)
        tab.keyboard.press("r")
        tab.keyboard.press("Enter")
        expect(tab.locator(f"#{gated} .decided")).to_contain_text(
            f"Rejected by {me}", timeout=20_000
        )
        assert page.errors == []
    finally:
        server.stop()
    out = shep("audit", "export", "--kind", "decisions", check=True).stdout
    decisions = [
        d for d in map(json.loads, out.splitlines()) if d.get("run") == run.hex and d.get("actor")
    ]
    assert [(d["verdict"], d["actor"]) for d in decisions] == [
        ("answered", me),
        ("rejected", me),
    ]
    assert decisions[0]["answer"] == "Large: the whole package"
    assert decisions[1]["reason"] == "Too vague."
