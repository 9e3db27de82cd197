"""The guard of a real `shep ui` process: the token, the Host, the Origin, the CSRF token,
the headers of every response, and what never reaches a page."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from urllib.parse import urlencode

from tests.shep.web.ui_server import UiServer

Served = tuple[UiServer, dict[str, str]]
PAGES = ("/", "/inbox", "/features", "/audit", "/supervisor")


def _csrf(server: UiServer) -> str:
    found = re.search(r'data-csrf="([0-9a-f]+)"', server.get("/").body)
    assert found is not None
    return found[1]


def test_without_the_token_every_path_is_refused(served: Served) -> None:
    """No cookie, or a wrong one: 403 and a line saying to open the printed address,
    on pages, fragments, the live stream, static files and downloads alike."""
    server, ids = served
    for path in (*PAGES, f"/runs/{ids['run']}", "/events", "/static/app.js", "/audit/export/jsonl"):
        reply = server.get(path, cookie=False)
        assert reply.status == 403, path
        assert "open the address `shep ui` printed" in reply.body
        wrong = server.get(path, headers={"Cookie": f"shep_ui_{server.port}=x{server.token}"})
        assert wrong.status == 403, path


def test_the_token_in_the_address_becomes_a_strict_httponly_cookie(served: Served) -> None:
    """The printed address sets the cookie (HttpOnly, SameSite=Strict) and redirects to the
    same page without the token; a wrong token sets nothing."""
    server, _ = served
    reply = server.get(f"/inbox?{urlencode({'token': server.token, 'x': '1'})}", cookie=False)
    assert reply.status == 303
    assert reply.headers["location"] == "/inbox?x=1"
    assert reply.cookies == [
        f"shep_ui_{server.port}={server.token}; HttpOnly; SameSite=Strict; Path=/"
    ]
    bad = server.get("/?token=not-it", cookie=False)
    assert bad.status == 403
    assert bad.cookies == []


def test_a_foreign_host_header_is_refused(served: Served) -> None:
    """DNS rebinding: a page of another site whose name resolves here sends its own name
    as Host; it is refused even with the cookie. IP addresses and localhost are ours."""
    server, _ = served
    for host in (f"evil.example:{server.port}", "attacker.test", "", f"127.0.0.1:{server.port}x"):
        assert server.get("/", headers={"Host": host}).status == 421, host
    for host in (f"localhost:{server.port}", f"127.0.0.1:{server.port}", "[::1]:8000"):
        assert server.get("/", headers={"Host": host}).status == 200, host


def test_an_action_needs_this_servers_origin_and_csrf_token(served: Served) -> None:
    """A POST without Origin, from another origin, or without the page's CSRF token is
    refused before anything is decided; the question stays pending."""
    server, ids = served
    path = f"/items/{ids['question']}/answer"
    mine = f"http://{server.host}:{server.port}"
    csrf = _csrf(server)
    form = urlencode({"option": "small", "csrf": csrf})
    assert server.request("POST", path, body=form).status == 403
    for origin in ("http://evil.example", "null", f"http://localhost:{server.port + 1}"):
        assert server.request("POST", path, body=form, headers={"Origin": origin}).status == 403
    no_csrf = server.request("POST", path, body="option=small", headers={"Origin": mine})
    assert no_csrf.status == 403
    assert "no CSRF token" in no_csrf.body
    forged = urlencode({"option": "small", "csrf": server.token})
    assert server.request("POST", path, body=forged, headers={"Origin": mine}).status == 403
    assert "pending" in server.get(f"/items/{ids['question']}").body
    assert "Answered" not in server.get(f"/items/{ids['question']}").body


def test_every_response_forbids_inline_script_and_framing(served: Served) -> None:
    """Pages, fragments, static files and refusals all carry the CSP (script from the server
    only, no inline), no framing, no sniffing, no referrer, no caching."""
    server, ids = served
    for path in (*PAGES, f"/runs/{ids['run']}", f"/runs/{ids['run']}/live", "/static/app.css"):
        headers = server.get(path).headers
        assert "script-src 'self'" in headers["content-security-policy"], path
        assert "unsafe-inline" not in headers["content-security-policy"]
        assert "frame-ancestors 'none'" in headers["content-security-policy"]
        assert headers["x-frame-options"] == "DENY"
        assert headers["x-content-type-options"] == "nosniff"
        assert headers["referrer-policy"] == "no-referrer"
        assert headers["cache-control"] == "no-store"
    refused = server.get("/", cookie=False).headers
    assert "script-src 'self'" in refused["content-security-policy"]


def test_no_page_holds_the_token_or_an_inline_script(served: Served) -> None:
    """The token is in no page or fragment (the CSRF token is another value), and no page
    has a script element with a body or an event handler attribute."""
    server, ids = served
    paths = (*PAGES, f"/runs/{ids['run']}", f"/runs/{ids['run']}/replay", f"/items/{ids['gate']}")
    for path in paths:
        body = server.get(path).body
        assert server.token not in body, path
        assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", body), path
        assert not re.search(r"\son[a-z]+=", body), path
    assert _csrf(server) != server.token


def test_port_in_use_is_one_line_and_exit_2(served: Served) -> None:
    """A second server on a port that is taken says so in one line and exits 2."""
    server, _ = served
    result = subprocess.run(
        [sys.executable, "-m", "shep", "ui", "--no-open", "--port", str(server.port)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr == (
        f"shep: Port {server.port} on 127.0.0.1 is in use (another `shep ui`?). Choose another "
        "with --port, or --port 0 for any free one.\n"
    )
    assert result.stdout == ""


def test_a_free_port_is_taken_by_port_0() -> None:
    """--port 0 listens on a free port and prints it in the address."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        server = UiServer.start()
        try:
            assert server.port not in (0, taken.getsockname()[1])
            assert server.get("/").status == 200
        finally:
            code, _, err = server.stop()
    assert code == 0
    assert err.endswith("Stopped.\n")


def test_another_host_needs_the_token_and_says_so() -> None:
    """--host 0.0.0.0 listens beyond the loopback: a warning line says who can reach it,
    and a request without the token is refused all the same."""
    server = UiServer.start("--host", "0.0.0.0")
    try:
        assert (
            server.get("/", cookie=False, headers={"Host": f"127.0.0.1:{server.port}"}).status
            == 403
        )
        assert server.get("/").status == 200
    finally:
        code, _, err = server.stop()
    assert code == 0
    assert err.startswith(
        "shep: warning: listening on 0.0.0.0: anyone who reaches this machine and has the "
        "token can see every run (and decide, unless --read-only).\n"
    )
