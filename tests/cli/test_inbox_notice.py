"""What waits in the inbox is mentioned after a command that succeeded, never before an
error: a failing command's stderr is its one error line."""

from __future__ import annotations

import json

from events.store import EventStore
from tests.shep.home.test_typed_settings import NOTICE, waiting_run
from tests.support.cli import shep


def test_a_failing_command_says_only_its_error(store: EventStore) -> None:
    """With a question waiting, `shep logs nope` and `shep status nope` are one line and
    exit 2; a command that succeeds still mentions the inbox, on stderr, once."""
    run_id = waiting_run(store)
    for args in (["logs", "nope"], ["status", "nope"], ["feat", "show", "nope"]):
        failed = shep(*args)
        assert (failed.returncode, failed.stdout) == (2, ""), args
        assert len(failed.stderr.splitlines()) == 1, failed.stderr
        assert failed.stderr.startswith("shep: No "), failed.stderr
    listed = shep("status", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [r["run_id"] for r in json.loads(listed.stdout)] == [run_id.hex]
    assert listed.stderr == NOTICE


def test_the_notice_follows_the_settings_the_command_leaves(store: EventStore) -> None:
    """Said after the command, the notice obeys the setting as the command left it: turning
    it off says so and nothing else; turning it on again mentions the inbox."""
    waiting_run(store)
    off = shep("settings", "set", "inbox_notice", "off")
    assert (off.returncode, off.stdout, off.stderr) == (0, "inbox_notice = off\n", "")
    on = shep("settings", "set", "inbox_notice", "on")
    assert (on.returncode, on.stdout, on.stderr) == (0, "inbox_notice = on\n", NOTICE)
