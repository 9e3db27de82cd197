"""``shep audit verify`` on a shared store, and the dashboard's audit page, give one verdict.

Both call ``shep.audit.verify.verify_store``: the server's chain, then this home's copy
of the log against it. Two homes on one real PostgreSQL database: the page served by one
home says what that home's ``shep audit verify`` prints, the same head hash included;
a copy edited below its head, or made from another store, does not verify, and both
faces name it alike; with the server gone, the copy alone is verified, and said so.
"""

from __future__ import annotations

import html
import re
import shutil
from pathlib import Path

import apsw
import pytest

from events.postgres_url import where
from events.postgres_verify import verify_pg_chain
from projections.mirror import copy_file
from shep.audit.verify import verify_store
from tests.cli.test_store_migrate import closed_port, one_error_line
from tests.projections.test_mirror import edit_copy, home_env
from tests.shep.web.ui_server import UiServer
from tests.support.cli import shep
from tests.support.postgres_server import PostgresServer

ROOT = Path(__file__).resolve().parents[2]


def set_values(env: dict[str, str], *values: str) -> None:
    """One event on the store per value (a setting changed), through the CLI; then the
    home's copy is brought up to the store's head (a command copies what is there when it
    starts, so the copy is one event behind without ``shep status`` after)."""
    for value in values:
        shep("settings", "set", "heartbeat_interval", value, env=env, check=True)
    shep("status", env=env, check=True)


def page_verdict(server: UiServer) -> tuple[str, str, str]:
    """(the verdict, the head hash, the problem) the audit page shows after "Verify"."""
    body = server.get("/audit?verify=1").body

    def text(element_id: str) -> str:
        found = re.search(rf'id="{element_id}">(.*?)</', body, re.S)
        return html.unescape(found[1]).strip() if found else ""

    return text("verify-summary"), text("head-hash"), text("verify-problem")


def serve(home: Path, url: str) -> UiServer:
    return UiServer.start(env={**home_env(home, url), "PYTHONPATH": str(ROOT)})


@pytest.mark.slow
def test_the_page_shows_the_verdict_and_head_hash_that_audit_verify_prints(
    tmp_path: Path, pg_url: str
) -> None:
    """The build box's page and its CLI: the server's chain verifies, this home's copy
    matches it, the same head hash (the laptop's events included, and the laptop's own
    verdict names the same head)."""
    laptop, buildbox = tmp_path / "laptop", tmp_path / "buildbox"
    set_values(home_env(laptop, pg_url), "5", "6")
    set_values(home_env(buildbox, pg_url), "7")
    server = serve(buildbox, pg_url)
    try:
        printed = shep("audit", "verify", env=home_env(buildbox, pg_url), check=True).stdout
        summary, head, problem = page_verdict(server)
    finally:
        server.stop()
    assert summary == (
        f"OK: 3 events verify on the shared store at {where(pg_url)}. "
        "This machine's copy (3 events) matches."
    )
    assert problem == ""
    assert printed.strip() == f"{summary} Head hash: {head}"
    assert head == verify_pg_chain(pg_url).head_hash.hex()
    on_laptop = shep("audit", "verify", env=home_env(laptop, pg_url), check=True).stdout
    assert on_laptop.split()[-1] == head


@pytest.mark.slow
def test_a_copy_edited_below_its_head_fails_on_the_page_as_in_the_cli(
    tmp_path: Path, pg_url: str
) -> None:
    """A row of the build box's copy edited while its page is served: the page says the
    chain breaks where ``shep audit verify`` says it does (exit 4 there), and shows no
    head hash to anchor; the server's own log is whole."""
    laptop, buildbox = tmp_path / "laptop", tmp_path / "buildbox"
    set_values(home_env(laptop, pg_url), "5", "6")
    set_values(home_env(buildbox, pg_url), "7")
    server = serve(buildbox, pg_url)
    try:
        conn = apsw.Connection(copy_file(str(buildbox), pg_url))
        try:
            edit_copy(
                conn,
                "UPDATE stored_events SET state = CAST(state || x'20' AS BLOB) "
                "WHERE notification_id = 2",
            )
        finally:
            conn.close()
        result = shep("audit", "verify", env=home_env(buildbox, pg_url))
        summary, head, problem = page_verdict(server)
    finally:
        server.stop()
    assert result.returncode == 4
    line = one_error_line(result)
    assert line.startswith("Hash chain broken at position 2: ")
    assert problem == f"Does not verify: {line}"
    assert (summary, head) == ("", "")
    assert verify_pg_chain(pg_url).ok


def test_a_copy_made_from_another_store_differs_and_both_faces_say_where(
    tmp_path: Path, pg_url: str, pg_server: PostgresServer
) -> None:
    """A home whose copy of the log was made from another database (it verifies on its
    own, and so does the server's log): the copy's head is not the hash the server has
    at that position. ``verify_store`` names the position; the CLI prints the same line
    and exits 4."""
    other_url = pg_server.database()
    laptop, buildbox = tmp_path / "laptop", tmp_path / "buildbox"
    set_values(home_env(laptop, pg_url), "5", "6", "7")
    set_values(home_env(buildbox, other_url), "8", "9")
    # The other store's copy, put where this store's copy of the build box would be.
    copy = copy_file(str(buildbox), pg_url)
    shutil.copyfile(copy_file(str(buildbox), other_url), copy)

    result = verify_store(copy, pg_url)
    assert not result.ok
    assert result.first_bad_position == 2
    assert result.problem == (
        f"This machine's copy of the log ({copy}, 2 events) differs from the shared store "
        "at position 2: it was made from another store or edited. Move it aside; the next "
        "command copies the log anew."
    )
    assert verify_store(copy, other_url).ok  # the copy itself is whole

    printed = shep("audit", "verify", env=home_env(buildbox, pg_url))
    assert printed.returncode == 4
    assert one_error_line(printed) == result.problem


def test_with_the_server_gone_the_copy_alone_verifies_and_says_so(
    tmp_path: Path, pg_url: str
) -> None:
    """The shared store unreachable: this home's copy is verified on its own; the result
    says the server could not be reached, and still proves an anchor against the copy."""
    home = tmp_path / "laptop"
    set_values(home_env(home, pg_url), "5", "6", "7")
    copy = copy_file(str(home), pg_url)
    online = verify_store(copy, pg_url, anchor_position=2)
    gone = f"postgresql://shep@127.0.0.1:{closed_port()}/shep"

    result = verify_store(copy, gone, anchor_position=2)
    assert result.ok
    assert result.summary == "OK: this machine's copy (3 events) verifies."
    assert result.offline.endswith(" Verifying this machine's copy of the log only.")
    assert result.head_hash == online.head_hash
    assert result.anchor_hash == online.anchor_hash is not None
