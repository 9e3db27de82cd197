"""What `shep status` and `shep inbox` import beyond click, apsw and msgspec: a closed list.

Every command pays for what it imports before its first query; `status` and `inbox`
are what a user runs most. A module that joins their path fails here: make it lazy,
or name it below with the reason it is needed.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from events.store import EventStore
from tests.shep.home.test_typed_settings import waiting_run
from tests.support.cli import shep
from tests.support.histories import random_run

#: Ours, on the path of both commands: the CLI's root, the runtime, the read side.
OURS = frozenset(
    {
        "shep",
        "shep.cli",
        "shep.cli.render",
        "shep.home",
        "shep.home.runtime",
        "shep.home.secrets",  # which store the home is on
        "shep.runs",
        "shep.runs.inbox_watch",  # every command says what waits in the inbox
        "events",
        "events.versions",
        "events.display",
        "events.errors",
        "events.sqlite_file",
        "events.words",
        "events.run_status",
        "events.inbox_status",
        "events.run_ids",
        "projections",
        "projections.tables",
        "projections.database",
        "projections.state",
        "projections.queries",
        "projections.inbox_queries",
    }
)
#: The standard library beyond the baseline: click's gettext imports locale on its first
#: message; the printable check uses unicodedata; the entry point freezes what it imported
#: with gc (built in: nothing to load).
STDLIB = frozenset({"locale", "_locale", "unicodedata", "gc"})
#: What the inbox notice reads when an item is pending (not `inbox` itself, which lists the
#: items instead): the ``inbox_notice`` setting, folded from the settings stream.
NOTICE = frozenset(
    {
        "shep.home.settings",
        "events.settings",
        "events.setting_values",
        "events.base",
        "dataclasses",
        "copy",
        "hashlib",
        "_hashlib",
        "_blake2",
    }
)
#: Each command's own module.
COMMAND_MODULES = {"status": {"shep.cli.status"}, "inbox": {"shep.cli.inbox"}}

_PROBE = (
    "import sys\n"
    "import click, apsw, msgspec\n"
    "before = set(sys.modules)\n"
    "from shep.cli import main\n"
    "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
    "sys.stderr.write('IMPORTED=' + ','.join(sorted(set(sys.modules) - before)) + '\\n')\n"
)


def _imported(*args: str) -> set[str]:
    """The modules ``shep ARGS`` imports beyond the baseline, once its projections are
    current (the first command after a write catches them up, which imports the folds)."""
    shep(*args, check=True)
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, *args],
        capture_output=True,
        text=True,
        check=False,
        env=os.environ.copy(),
        stdin=subprocess.DEVNULL,
    )
    lines = [line for line in result.stderr.splitlines() if line.startswith("IMPORTED=")]
    assert lines, result.stderr
    return set(filter(None, lines[-1].removeprefix("IMPORTED=").split(",")))


@pytest.mark.parametrize("args", [["status"], ["status", "--json"], ["inbox", "--json"], ["inbox"]])
def test_read_commands_import_only_the_listed_modules(store: EventStore, args: list[str]) -> None:
    """`shep status` and `shep inbox` on a home with runs, one of them waiting on a question,
    import nothing beyond the baseline but the modules listed here (no event types, no
    eventsourcing, no hashlib of the audit trail, no json or tempfile of the secrets).
    """
    random_run(store, random.Random(3))
    waiting_run(store)
    notice = NOTICE if args[0] != "inbox" else frozenset()
    unexpected = _imported(*args) - OURS - STDLIB - COMMAND_MODULES[args[0]] - notice
    assert not unexpected, f"shep {' '.join(args)} imports {sorted(unexpected)}"


def test_status_on_an_empty_home_imports_only_the_listed_modules(shep_home: Path) -> None:
    """On a home with no run, `shep status` imports no more than on a busy one, and not
    the inbox's machinery: one indexed look says nothing waits.
    """
    inbox = {"shep.runs", "shep.runs.inbox_watch", "projections.inbox_queries"}
    unexpected = _imported("status") - (OURS - inbox) - STDLIB - COMMAND_MODULES["status"]
    assert not unexpected, f"shep status imports {sorted(unexpected)}"


_FROZEN = (
    "import gc, sys\n"
    "from shep.cli import main\n"
    "how = sys.argv.pop(1)\n"
    "sys.argv[0] = 'shep'\n"
    "try:\n    main() if how == 'entry' else main(sys.argv[1:])\n"
    "except SystemExit:\n    pass\n"
    "sys.stderr.write(f'FROZEN={gc.get_freeze_count()}\\n')\n"
)


@pytest.mark.parametrize(("how", "frozen"), [("entry", True), ("caller", False)])
def test_the_entry_point_leaves_what_it_imported_to_no_collection(
    shep_home: Path, how: str, frozen: bool
) -> None:
    """Run as the process's entry point (the console script, `python -m shep`), shep moves
    what it imported before the command out of the collector's way (the collector, in the
    command and at Python's exit, went through all of it: a tenth of `shep status`). A
    caller passing its own arguments (a test running commands in its process) keeps its
    collector as it is: nothing of its own is frozen.
    """
    result = subprocess.run(
        [sys.executable, "-c", _FROZEN, how, "status"],
        capture_output=True,
        text=True,
        check=False,
        env=os.environ.copy(),
        stdin=subprocess.DEVNULL,
    )
    lines = [line for line in result.stderr.splitlines() if line.startswith("FROZEN=")]
    assert lines, result.stderr
    assert result.returncode == 0, result.stderr
    assert "No runs yet" in result.stdout
    assert (int(lines[-1].removeprefix("FROZEN=")) > 1000) is frozen, lines
