"""The corpus of real stores (``tests/support/histories/``): every store a released shep wrote
still reads the same with this code, verifies to the same head, and its waiting and
interrupted runs still finish.

Entries are made by ``python -m tests.support.corpus.make`` (see ``tests/support/corpus/entry.py``).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from events.versions import SHEP_VERSION
from tests.support.corpus import shared
from tests.support.corpus.entry import (
    HISTORIES,
    Entry,
    accepted_changes,
    comparable,
    entries,
    reads,
    settle,
    shep,
    verified_head,
    world_lock,
    world_root,
)
from tests.support.postgres_server import REQUIRE_ENV


def test_this_version_has_an_entry() -> None:
    """The version pyproject.toml gets from events/versions.py has its corpus entry: a
    release without one fails here (make it with ``python -m tests.support.corpus.make``)."""
    entry = HISTORIES / SHEP_VERSION
    assert (entry / "shep.db.gz").is_file(), (
        f"tests/support/histories/{SHEP_VERSION}/ is missing: "
        "run `python -m tests.support.corpus.make`"
    )
    assert (entry / "runs.json").is_file()
    assert (entry / "outputs" / "head.txt").is_file()


def test_accepted_changes_each_say_why(tmp_path: Path) -> None:
    """An entry's ``changes`` file: each line names an output (a glob) and a key, with a
    ``#`` reason; the keys are left out of the comparison of those outputs only, ``*``
    leaves the whole output out, and a line without a reason is refused."""
    entry = Entry(tmp_path / "9.9.9")
    entry.path.mkdir()
    (entry.path / "changes").write_text(
        "# a comment\n\nlogs/*.jsonl  message  # reworded in 9.9.9\nhead.txt * # re-hashed\n"
    )
    accepted = accepted_changes(entry)
    assert accepted == {"logs/*.jsonl": {"message"}, "head.txt": {"*"}}
    line = '{"kind": "run.created", "message": "old words"}\n'
    assert comparable("logs/a.jsonl", line, accepted) == [{"kind": "run.created"}]
    assert comparable("replay/a.jsonl", line, accepted) == [
        {"kind": "run.created", "message": "old words"}
    ]
    assert comparable("head.txt", "abc\n", accepted) is None
    (entry.path / "changes").write_text("status.json pid\n")
    with pytest.raises(AssertionError, match="why"):
        accepted_changes(entry)


def _driven_to_completion(env: Mapping[str, str], run: str, how: str) -> dict[str, Any]:
    """``run`` taken to its end as a person would: each question answered with its
    recommended option, each gate approved, an interrupted run resumed; its last status."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        found = _status(env, run)
        if found["status"] in ("completed", "failed", "cancelled"):
            return found
        if found["status"] == "interrupted":
            shep(env, "resume", run)
            continue
        items = json.loads(shep(env, "inbox", "--json", "--run", run))
        if not items:
            time.sleep(0.3)
            continue
        item = items[0]
        if item["kind"] == "question":
            options = item["options"]
            pick = next((o for o in options if o["recommended"]), options[0])
            shep(env, "answer", item["item_id"], "--option", pick["id"], "--wait")
        else:
            shep(env, "approve", item["item_id"], "--wait")
    raise AssertionError(f"run {run} ({how}) did not finish in 300 s")


def _status(env: Mapping[str, str], run: str) -> dict[str, Any]:
    runs: list[dict[str, Any]] = json.loads(shep(env, "status", "--json"))
    return next(r for r in runs if r["run_id"] == run)


def _reads_the_same_and_finishes(entry: Entry, env: Mapping[str, str]) -> None:
    """The checks of an entry opened in ``env`` (its world unpacked): see the tests."""
    recorded = entry.outputs()
    runs = {name: r["run_id"] for name, r in entry.runs.items()}
    accepted = accepted_changes(entry)
    root = world_root(entry.version)
    now = reads(env, runs, root)
    assert sorted(now) == sorted(recorded)
    differing = [
        name
        for name in sorted(recorded)
        if comparable(name, now[name], accepted) != comparable(name, recorded[name], accepted)
    ]
    assert not differing, f"reads of the {entry.version} store changed: {differing}"
    assert verified_head(env) == recorded["head.txt"].strip()
    export = root / "export.jsonl"
    export.write_text(shep(env, "audit", "export"))
    shep(env, "audit", "verify", "--export", str(export))

    finished = 0
    for name, run in sorted(entry.runs.items()):
        if run["finish"] is None:
            continue
        assert _status(env, run["run_id"])["status"] == run["status"], name
        final = _driven_to_completion(env, run["run_id"], run["finish"])
        assert final["status"] == "completed", (name, final["status"], final["error"])
        finished += 1
    if finished:
        assert verified_head(env) != recorded["head.txt"].strip()
    settle(root)  # a supervisor the last approval started
    shutil.rmtree(root)  # kept when a check failed, to look into


@pytest.mark.slow
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("entry", entries(), ids=lambda e: e.version)
def test_an_old_store_reads_the_same_and_its_runs_finish(entry: Entry) -> None:
    """The store of ``entry``, opened by this code in its world: every read a user makes
    (status, inbox, each run's logs and replay, the audit export) equals the one recorded
    when the entry was made, but for the differences its ``changes`` file accepts; ``audit
    verify`` gives the same head, and a fresh export verifies; then every run that waits or
    was interrupted (a real SIGKILL) resumes to completion with the demo agent."""
    with world_lock():
        _reads_the_same_and_finishes(entry, entry.unpack())


@pytest.mark.slow
@pytest.mark.timeout(1200)
@pytest.mark.parametrize(
    "entry", [e for e in entries() if (e.path / shared.SHARED).exists()], ids=lambda e: e.version
)
def test_the_shared_store_copy_reads_the_same_and_its_runs_finish(entry: Entry) -> None:
    """The entry's shared-store copy, restored on a throwaway PostgreSQL server, with the
    world's home pointed at it (``SHEP_DATABASE_URL``): the same reads, the same head, and
    its waiting and interrupted runs finish there too."""
    with world_lock(), shared.server() as pg:
        if pg is None:
            if os.environ.get(REQUIRE_ENV):
                pytest.fail("PostgreSQL is not installed (SHEP_REQUIRE_POSTGRES is set)")
            pytest.skip("PostgreSQL is not installed")
        env = entry.unpack()
        url = shared.restore(entry, pg)
        _reads_the_same_and_finishes(entry, {**env, "SHEP_DATABASE_URL": url})
