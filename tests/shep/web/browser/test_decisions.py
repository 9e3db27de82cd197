"""Deciding on the page, and seeing others decide: a question answered, a gate rejected
and one approved in the browser resume the run with a real worker, recorded with the
user's actor; a
decision made first from the CLI (here or on another machine of a shared store) shows
on the open page, who and when; a read-only server shows and takes no action."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from events.store import EventStore
from shep.home.identity import user_actor
from tests.shep.web.browser.conftest import Watched, screenshot
from tests.shep.web.ui_server import UiServer
from tests.support.cli import shep
from tests.support.store_items import ask_on_new_run, gate, question


def _post_from_page(page: Any, path: str, form: dict[str, str]) -> dict[str, Any]:
    """What the page's own script would post (with its CSRF token): status and reply."""
    return dict(
        page.evaluate(
            """async ([path, form]) => {
                const r = await fetch(path, {method: "POST", body: new URLSearchParams(form),
                    headers: {"X-CSRF-Token": document.body.dataset.csrf}});
                return {status: r.status, text: await r.text()};
            }""",
            [path, form],
        )
    )


def _decisions(env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    out = shep("audit", "export", "--kind", "decisions", env=env, check=True).stdout
    return [json.loads(line) for line in out.splitlines()]


def _waiting_item(run_id: str, kind: str) -> dict[str, Any]:
    items = json.loads(shep("inbox", "--json", check=True).stdout)
    found = [i for i in items if i["run_id"] == run_id and i["kind"] == kind]
    assert len(found) == 1, items
    return dict(found[0])


@pytest.mark.slow
def test_answer_and_reject_on_the_page_resume_the_run(
    page: Watched,
    fake_claude: Path,
    repo: Path,
    test_workflows: None,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """gated-review waits on its question: answered on the page, a worker resumes the run
    to its gate, which appears on the open page with the file it approves; rejected
    there with a reason, the draft runs again and the gate is asked again. The audit
    export shows both decisions with the user's actor."""
    monkeypatch.setenv("FAKE_DELAY", "0.2")
    run_id = shep("run", "gated-review", "--repo", str(repo), "--background", check=True)
    run = run_id.stdout.strip()
    server = UiServer.start()
    try:
        inbox = page.page
        inbox.goto(server.url)
        inbox.goto(f"{server.base}/inbox")
        question_box = inbox.locator("section.item.kind-question")
        expect(question_box).to_have_count(1, timeout=30_000)
        expect(question_box.locator(".recommended")).to_have_count(1)
        question_box.locator("input[value=small]").check()
        question_box.locator("button[type=submit]").click()
        me = user_actor(None)
        expect(question_box.locator(".decided")).to_contain_text(f"by {me}", timeout=30_000)
        gate_box = inbox.locator("section.item.kind-approval.status-pending")
        expect(gate_box).to_have_count(1, timeout=60_000)
        expect(gate_box.locator("details.artifact pre")).to_contain_text("Scope: Small: one module")
        first_gate = gate_box.get_attribute("id")
        gate_box.locator("input[name=reason]").fill("Shorter, please.")
        gate_box.locator("form[action$=reject] button").click()
        expect(inbox.locator(f"#{first_gate} .decided")).to_contain_text(
            f"Rejected by {me}", timeout=30_000
        )
        again = inbox.locator("section.item.kind-approval.status-pending")
        expect(again).to_have_count(1, timeout=60_000)
        assert again.get_attribute("id") != first_gate
        assert page.errors == []
    finally:
        server.stop()
    decisions = [d for d in _decisions() if d.get("run") == run and d.get("actor")]
    assert [(d["verdict"], d["actor"]) for d in decisions] == [
        ("answered", me),
        ("rejected", me),
    ]
    assert decisions[0]["answer"] == "Small: one module"
    assert decisions[1]["reason"] == "Shorter, please."


@pytest.mark.slow
def test_a_decision_made_first_from_the_cli_shows_who_decided(
    page: Watched, shep_home: Path, tmp_path: Path
) -> None:
    """The question is open on the page; `shep answer --as alice` decides it first: the
    page shows who and when without reload, and the page's own answer, sent after,
    is refused with the same words as the CLI's."""
    shep_home.mkdir(mode=0o700)
    (tmp_path / "repo").mkdir()
    with EventStore(shep_home / "shep.db") as store:
        _, items = ask_on_new_run(store, tmp_path / "repo", [question("q1")], resumed=True)
    item = items[0].hex
    server = UiServer.start()
    try:
        tab = page.page
        tab.goto(server.url)
        tab.goto(f"{server.base}/inbox")
        box = tab.locator(f"#item-{item}")
        expect(box.locator("form")).to_have_count(1)
        shep("answer", item, "--option", "large", "--as", "alice", check=True)
        expect(box.locator(".decided")).to_contain_text("by user:alice at ", timeout=20_000)
        expect(box.locator("form")).to_have_count(0)
        reply = _post_from_page(tab, f"/items/{item}/answer", {"option": "small"})
        assert reply["status"] == 409
        message = json.loads(reply["text"])["message"]
        assert message.startswith(f"Item {item[:8]} was already answered")
        assert "by user:alice at " in message
        assert tab.locator("#inbox-count").inner_text() == "0 waiting in the inbox"
    finally:
        server.stop()


@pytest.mark.slow
def test_read_only_shows_no_action_and_refuses_them(
    page: Watched, shep_home: Path, tmp_path: Path
) -> None:
    """--read-only: the inbox shows the question and the gate with no form and no button,
    the run page no action; an action posted anyway (with the page's CSRF token) is
    refused, and nothing is decided."""
    shep_home.mkdir(mode=0o700)
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "shep-review.md").write_text("# Review\n")
    with EventStore(shep_home / "shep.db") as store:
        run, items = ask_on_new_run(
            store, tmp_path / "repo", [question("q1"), gate("g1")], resumed=True
        )
    server = UiServer.start("--read-only")
    try:
        tab = page.page
        tab.goto(server.url)
        for path in ("/inbox", f"/runs/{run.hex}", f"/items/{items[1].hex}"):
            tab.goto(server.base + path)
            assert tab.locator("form[method=post], button[type=submit]").count() == 0, path
            assert "read-only" in tab.inner_text("footer")
        tab.goto(server.base + "/inbox")
        assert "Small: one module" in tab.inner_text(f"#item-{items[0].hex}")
        for path, form in (
            (f"/items/{items[0].hex}/answer", {"option": "small"}),
            (f"/items/{items[1].hex}/reject", {"reason": "no"}),
            (f"/runs/{run.hex}/cancel", {}),
        ):
            reply = _post_from_page(tab, path, form)
            assert reply["status"] == 403, path
            assert "read-only" in reply["text"]
    finally:
        server.stop()
    pending = json.loads(shep("inbox", "--json", check=True).stdout)
    assert sorted(i["item_id"] for i in pending) == sorted(i.hex for i in items)


@pytest.mark.slow
def test_a_shared_store_shows_the_other_machines_runs_and_decisions(
    page: Watched, pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two homes on one PostgreSQL store: the page served by the build box shows the
    laptop's waiting run; the laptop answers from its CLI and the build box's open page
    shows it, who decided included. The store's password reaches no page."""
    secret = "s3cret-pass"
    url = pg_url.replace("postgresql://", "postgresql://", 1)
    user_at = url.split("//", 1)[1].split("@", 1)
    with_password = f"postgresql://{user_at[0]}:{secret}@{user_at[1]}"
    laptop = {"SHEP_HOME": str(tmp_path / "laptop"), "SHEP_DATABASE_URL": with_password}
    buildbox = {"SHEP_HOME": str(tmp_path / "buildbox"), "SHEP_DATABASE_URL": with_password}
    (tmp_path / "repo").mkdir()
    monkeypatch.setenv("SHEP_HOST", "laptop")
    with EventStore(with_password) as store:
        run, items = ask_on_new_run(store, tmp_path / "repo", [question("q1")], resumed=True)
    item = items[0].hex
    server = UiServer.start(env={**buildbox, "SHEP_HOST": "buildbox"})
    try:
        tab = page.page
        tab.goto(server.url)
        expect(tab.locator(f"#run-{run.hex} .badge")).to_have_text("running", timeout=20_000)
        tab.goto(f"{server.base}/inbox")
        box = tab.locator(f"#item-{item}")
        expect(box.locator("form")).to_have_count(1)
        footer = tab.inner_text("footer")
        assert "***" in footer
        assert secret not in tab.content()
        shep("answer", item, "--option", "small", "--as", "bob", env=laptop, check=True)
        expect(box.locator(".decided")).to_contain_text("by user:bob at ", timeout=30_000)
        for path in ("/", f"/runs/{run.hex}", "/audit", "/supervisor", f"/items/{item}"):
            tab.goto(server.base + path)
            assert secret not in tab.content(), path
        screenshot(tab, "item-decided-elsewhere", tmp_path)
    finally:
        server.stop()


@pytest.mark.slow
def test_a_gate_approved_by_clicking_on_the_page_lets_the_run_go_on(
    page: Watched,
    fake_claude: Path,
    repo: Path,
    test_workflows: None,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """gated-review's question answered from the CLI; its gate, open on the inbox page,
    is approved by a click (a comment typed): the page says so and shows who approved,
    a worker takes the run on, and the run's page shows it completed without reload."""
    monkeypatch.setenv("FAKE_DELAY", "0.2")
    run = shep("run", "gated-review", "--repo", str(repo), "--background", check=True)
    run_id = run.stdout.strip()
    server = UiServer.start()
    try:
        tab = page.page
        tab.goto(server.url)
        tab.goto(f"{server.base}/inbox")
        expect(tab.locator("section.item.kind-question")).to_have_count(1, timeout=30_000)
        shep("answer", run_id[:8], "--option", "small", check=True)
        gate_box = tab.locator("section.item.kind-approval.status-pending")
        expect(gate_box).to_have_count(1, timeout=60_000)
        item = str(gate_box.get_attribute("id"))[len("item-") :]
        gate_box.locator("input[name=comment]").fill("Good plan.")
        gate_box.locator("form[action$=approve] button").click()
        me = user_actor(None)
        expect(tab.locator(f"#item-{item} .decided")).to_contain_text(
            f"Approved by {me}", timeout=30_000
        )
        tab.goto(f"{server.base}/runs/{run_id}")
        expect(tab.locator("#run-status")).to_have_text("completed", timeout=60_000)
        assert page.errors == []
    finally:
        server.stop()
    decisions = [d for d in _decisions() if d.get("run") == run_id and d.get("actor")]
    assert [(d["verdict"], d["actor"]) for d in decisions] == [
        ("answered", me),
        ("approved", me),
    ]
    assert decisions[1]["reason"] == "Good plan."
