"""docs/teams.md: two machines on one shared store, a real PostgreSQL server.

Two shep homes stand for two machines (``SHEP_HOST`` names each): the laptop
moves its log into a throwaway PostgreSQL cluster (tests/support/postgres_server.py:
Debian's binaries, trust auth on a free loopback port, shown as 5432) and
starts a feature there; the build box answers its question; then the server
goes away and the build box reads its own copy of the log.
"""

from __future__ import annotations

import importlib
import json
import sys
from types import ModuleType

from events.run_status import RunStatus
from projections.mirror import copy_name
from shep.cli.docgen.reference import CLONE
from shep.cli.docgen.scenarios import sample_repo
from shep.cli.docgen.scratch import Scratch, Transcript

LAPTOP = "[laptop] "
BUILDBOX = "[buildbox] "


def _servers() -> ModuleType:
    if str(CLONE) not in sys.path:
        sys.path.insert(0, str(CLONE))
    return importlib.import_module("tests.support.postgres_server")


def missing() -> str | None:
    if _servers().find_binaries() is None:
        return "PostgreSQL's binaries (initdb, postgres) are not installed"
    return None


def _waiter(cmdline: str) -> bool:
    """The laptop's waiter for decisions made elsewhere lives as long as the run waits."""
    return " _await " in cmdline


def play(s: Scratch, out: Transcript) -> None:
    servers = _servers()
    binaries = servers.find_binaries()
    server = servers.PostgresServer(binaries).start()
    try:
        _play(s, out, server)
    finally:
        server.stop()


def _play(s: Scratch, out: Transcript, server: object) -> None:
    url = server.database("team")  # type: ignore[attr-defined]
    port = server.port  # type: ignore[attr-defined]
    # libpq's messages name the port too ("port 45267 failed").
    s.shown_as += [(f"127.0.0.1:{port}", "127.0.0.1:5432"), (f"port {port} ", "port 5432 ")]
    # A home's copy is named after the store: the name of the store shown, not of this one.
    s.shown_as += [(copy_name(url), copy_name(url.replace(f":{port}/", ":5432/")))]
    s.env["SHEP_DEMO_DELAY"] = "0.05"
    inventory = sample_repo(s, s.root / "inventory")
    laptop = {"SHEP_HOME": str(s.root / "laptop"), "SHEP_HOST": "laptop"}
    buildbox = {"SHEP_HOME": str(s.root / "buildbox"), "SHEP_HOST": "buildbox"}

    out.add(
        "laptop",
        s.sh("shep settings agent --agent demo", env=laptop, prompt=LAPTOP),
        s.sh(f"shep run analyze-repository --repo {inventory}", env=laptop, prompt=LAPTOP),
        s.sh(f"shep store migrate --to {url}", env=laptop, prompt=LAPTOP),
        s.sh(f"shep settings store --url {url}", env=laptop, prompt=LAPTOP),
        s.sh("shep status", env=laptop, prompt=LAPTOP),
    )
    s.settle()
    joined = s.sh(f"shep settings store --url {url}", env=buildbox, prompt=BUILDBOX)
    started = s.sh(
        f'shep feat new "Add a low-stock report" --repo {inventory}', env=laptop, prompt=LAPTOP
    )
    s.settle(ignore=_waiter)
    status = s.sh("shep status", env=buildbox, prompt=BUILDBOX)
    inbox = s.sh("shep inbox", env=buildbox, prompt=BUILDBOX)
    (question,) = json.loads(s.out("shep inbox --json 2>/dev/null", env=buildbox))
    answer = s.sh(
        f"shep answer {question['item_id'][:8]} --option 1", env=buildbox, prompt=BUILDBOX
    )
    run = question["run_id"]

    def at_prd() -> bool:
        s.settle(ignore=_waiter)
        runs = json.loads(s.out("shep status --json 2>/dev/null", env=buildbox))
        return any(r["run_id"] == run and r["status"] == RunStatus.WAITING_APPROVAL for r in runs)

    s.wait_for(at_prd, "the laptop to resume the run with the build box's answer")
    out.add(
        "two-machines",
        joined,
        started,
        status,
        inbox,
        answer,
        s.sh("shep status", env=buildbox, prompt=BUILDBOX),
    )
    verified = [
        s.sh("shep audit verify", env=buildbox, prompt=BUILDBOX),
        s.sh("shep audit verify", env=laptop, prompt=LAPTOP),
    ]
    server.kill()  # type: ignore[attr-defined]
    offline = s.sh("shep status      # the server is unreachable", env=buildbox, prompt=BUILDBOX)
    out.add("offline", *verified, offline)
