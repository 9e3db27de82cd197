"""What another page can make the browser do to `shep ui`, in a real Chromium.

A page of another local server (same host, another port: the browser counts it as
the same site, so the dashboard's SameSite cookie goes with its requests) posts
an approval to the dashboard, once by script and once as a form, while the user
has the dashboard open: both are refused, and the gate stays pending. A name
that resolves to this machine (DNS rebinding) reaches the server's port and is
refused before anything, even with the token in the address.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from events.store import EventStore
from tests.shep.web.browser.conftest import ARGS, CHROMIUM, Watched
from tests.shep.web.ui_server import UiServer
from tests.support.cli import shep
from tests.support.store_items import ask_on_new_run, gate

_ATTACK = """<!doctype html>
<title>Free stickers</title>
<form id="f" method="post" action="{action}"><input name="comment" value="sure"></form>
<script>
fetch("{action}", {{method: "POST", mode: "no-cors", credentials: "include",
                    body: new URLSearchParams({{comment: "sure"}})}})
  .finally(() => {{ document.title = "fetched"; document.getElementById("f").submit(); }});
</script>
"""


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """No request lines on the test's stderr."""


@pytest.fixture
def foreign_site(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """Another web server on this machine: its address, and the folder it serves."""
    folder = tmp_path / "site"
    folder.mkdir()
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", folder
    finally:
        server.shutdown()
        server.server_close()


def _pending_gate(shep_home: Path, tmp_path: Path) -> str:
    shep_home.mkdir(mode=0o700)
    (tmp_path / "repo").mkdir()
    with EventStore(shep_home / "shep.db") as store:
        _, items = ask_on_new_run(store, tmp_path / "repo", [gate("g1")], resumed=True)
    return items[0].hex


def _still_pending(item: str) -> None:
    pending = json.loads(shep("inbox", "--json", check=True).stdout)
    assert [i["item_id"] for i in pending] == [item]
    out = shep("audit", "export", "--kind", "decisions", check=True).stdout
    lines = [json.loads(line) for line in out.splitlines()]
    assert [line["type"] for line in lines] == ["export-start", "export-end"]
    assert lines[-1]["count"] == 0


@pytest.mark.slow
def test_another_local_page_cannot_approve_a_gate(
    page: Watched, shep_home: Path, tmp_path: Path, foreign_site: tuple[str, Path]
) -> None:
    """The user opened the dashboard (its cookie is set), then a page of another server on
    this machine: its script's POST and its form's POST to the gate's approve action are
    both refused (the Origin is not the dashboard's, and no CSRF token), and the gate
    is still pending, with no decision in the log."""
    item = _pending_gate(shep_home, tmp_path)
    server = UiServer.start()
    site, folder = foreign_site
    try:
        tab = page.page
        tab.goto(server.url)  # the address with the token: the cookie is set
        assert tab.context.cookies(server.base)[0]["name"] == f"shep_ui_{server.port}"
        action = f"{server.base}/items/{item}/approve"
        (folder / "stickers.html").write_text(_ATTACK.format(action=action))

        with tab.expect_navigation(url=action) as landed:
            tab.goto(f"{site}/stickers.html")
        response = landed.value
        assert response is not None
        assert response.status == 403
        assert tab.inner_text("body").strip() == (
            "shep ui: an action must come from this server's page."
        )
    finally:
        server.stop()
    _still_pending(item)


@pytest.mark.slow
def test_a_name_resolving_to_this_machine_is_refused(
    browser: Any, shep_home: Path, tmp_path: Path
) -> None:
    """A browser that resolves another name to 127.0.0.1 (what DNS rebinding makes it do)
    reaches the server's port under that name: every page is refused with 421, even with
    the token in the address, and no cookie is set for that name."""
    item = _pending_gate(shep_home, tmp_path)
    server = UiServer.start()
    rebinding = browser.browser_type.launch(
        executable_path=CHROMIUM,
        args=[*ARGS, "--host-resolver-rules=MAP stickers.test 127.0.0.1"],
    )
    try:
        context = rebinding.new_context()
        tab = context.new_page()
        for path in (f"/?token={server.token}", "/inbox", f"/items/{item}"):
            response = tab.goto(f"http://stickers.test:{server.port}{path}")
            assert response is not None
            assert response.status == 421, path
            assert tab.inner_text("body").strip() == (
                "shep ui: this server does not answer to that host name."
            )
        assert context.cookies() == []
    finally:
        rebinding.close()
        server.stop()
    _still_pending(item)
