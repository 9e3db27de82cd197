"""Settings of every kind: seconds, on/off flags and text, checked, normalized, shown, folded.

inbox_notice (on/off), notify_command (text) and notify_timeout (seconds)
go through the same machinery as the older seconds settings: one check when
set, one fold for every reader, bad records skipped rather than raised.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from uuid import UUID

import apsw
import pytest

from commands.configure_agent import change_setting
from commands.create_run import create_run
from commands.start_run import start_run
from commands.suspend_run import Ask, suspend_run
from events.inbox import QuestionOption
from events.setting_values import (
    SETTINGS,
    InvalidSettingError,
    checked_value,
    default_values,
    fold_values,
)
from events.settings import SETTINGS_STREAM_ID, SettingChanged
from events.store import EventStore
from shep.home.identity import host_name
from shep.home.settings import load_settings, read_setting_values
from tests.shep.home.test_setting_bounds import record_unchecked
from tests.support.cli import shep

NOTICE = "1 waiting in the inbox: shep inbox\n"


def _recorded(store: EventStore) -> list[tuple[str, str]]:
    return [
        (e.key, e.value) for e in store.load(SETTINGS_STREAM_ID) if isinstance(e, SettingChanged)
    ]


def waiting_run(store: EventStore) -> UUID:
    """A run suspended on one pending question, as a worker leaves it when it exits."""
    run_id = create_run(
        store, workflow="wf", agent_type="demo", repo="/r", node_names=["ask"], created_by="me"
    )
    state = start_run(store, run_id, pid=os.getpid(), host=host_name())
    ask = Ask(
        interrupt_id="i1",
        kind="question",
        node="ask",
        question="Which?",
        options=[
            QuestionOption(id="a", label="A", recommended=True),
            QuestionOption(id="b", label="B"),
        ],
    )
    suspend_run(store, run_id, [ask], epoch=state.epoch)
    return run_id


@pytest.mark.parametrize(
    ("typed", "recorded"),
    [
        ("on", "on"),
        ("ON", "on"),
        (" true ", "on"),
        ("Yes", "on"),
        ("1", "on"),
        ("off", "off"),
        ("False", "off"),
        ("no", "off"),
        ("0", "off"),
    ],
)
def test_flag_words_are_recorded_normalized(store: EventStore, typed: str, recorded: str) -> None:
    """Every accepted spelling of on/off is recorded as plain ``on`` or ``off``."""
    change_setting(store, key="inbox_notice", value=typed, changed_by="me")
    assert _recorded(store) == [("inbox_notice", recorded)]
    assert load_settings(store).flags["inbox_notice"] is (recorded == "on")


@pytest.mark.parametrize("text", ["maybe", "", "2", "onn", "of f"])
def test_flag_refuses_other_words(text: str) -> None:
    """Anything but the eight words is refused, with the words it takes in the message."""
    with pytest.raises(InvalidSettingError) as caught:
        checked_value(default_values(), "inbox_notice", text)
    assert str(caught.value) == (
        f"inbox_notice is on or off (or true/false, yes/no, 1/0), not {text!r}."
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0.5", "notify_timeout must be between 1 and 300 seconds, not '0.5'."),
        ("301", "notify_timeout must be between 1 and 300 seconds, not '301'."),
        ("nan", "notify_timeout must be between 1 and 300 seconds, not 'nan'."),
        ("soon", "'soon' is not a number of seconds."),
    ],
)
def test_notify_timeout_bounds(text: str, message: str) -> None:
    """notify_timeout is seconds from 1 to 300, refused like the other seconds settings."""
    with pytest.raises(InvalidSettingError) as caught:
        checked_value(default_values(), "notify_timeout", text)
    assert str(caught.value) == message


def test_notify_timeout_bounds_are_inclusive() -> None:
    """1 and 300 themselves are accepted, recorded as floats like every seconds setting."""
    assert checked_value(default_values(), "notify_timeout", "1") == "1.0"
    assert checked_value(default_values(), "notify_timeout", "300") == "300.0"


def test_defaults() -> None:
    """With nothing recorded: the notice is on, no notify command, a 10 s notify timeout."""
    folded = fold_values([])
    assert folded.flags["inbox_notice"] is True
    assert folded.texts["notify_command"] == ""
    assert folded.values["notify_timeout"] == 10.0
    assert list(folded.every()) == list(SETTINGS)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "notify-me 'unclosed",
            "notify_command is not a valid command line (No closing quotation): quote it as a "
            'shell would, not "notify-me \'unclosed".',
        ),
        (
            "notify-me\n--twice",
            "notify_command must be one line without control characters, "
            "not 'notify-me\\n--twice'.",
        ),
        ("x" * 4097, "notify_command must be at most 4096 characters, not 4097."),
    ],
)
def test_notify_command_refuses_what_cannot_be_run(text: str, message: str) -> None:
    """A command line shlex cannot cut, several lines, or an endless text is refused when set."""
    with pytest.raises(InvalidSettingError) as caught:
        checked_value(default_values(), "notify_command", text)
    assert str(caught.value) == message


def test_notify_command_is_stripped_and_empty_turns_it_off(store: EventStore) -> None:
    """Surrounding blanks are dropped; an empty value records "" (no notifications)."""
    change_setting(store, key="notify_command", value="  notify-me --to 'a b'  ", changed_by="me")
    assert load_settings(store).texts["notify_command"] == "notify-me --to 'a b'"
    change_setting(store, key="notify_command", value="", changed_by="me")
    assert load_settings(store).texts["notify_command"] == ""
    assert _recorded(store) == [
        ("notify_command", "notify-me --to 'a b'"),
        ("notify_command", ""),
    ]


def test_set_and_show_every_kind(shep_home: Path, tmp_path: Path) -> None:
    """`settings set` echoes each kind as people read it; `show` lists all; --json types them."""
    script = tmp_path / "notify-me"
    script.write_text("#!/bin/sh\ncat >/dev/null\n")
    script.chmod(0o755)
    command = f"{script} --to 'my phone'"
    assert shep("settings", "set", "inbox_notice", "no", check=True).stdout == (
        "inbox_notice = off\n"
    )
    set_command = shep("settings", "set", "notify_command", command, check=True)
    assert (set_command.stdout, set_command.stderr) == (f"notify_command = {command}\n", "")
    assert shep("settings", "set", "notify_timeout", "30", check=True).stdout == (
        "notify_timeout = 30\n"
    )
    shown = shep("settings", "show", check=True)
    assert shown.stdout == (
        "agent: not configured (run `shep settings agent`)\n"
        "heartbeat_interval: 30\n"
        "agent_timeout: 1800\n"
        "agent_output_mib: 32\n"
        "orphan_after: 120\n"
        "inbox_notice: off\n"
        "collaboration: off\n"
        f"notify_command: {command}\n"
        "notify_timeout: 30\n"
        "feature_fast: off\n"
        "allow_prd: off\n"
        "allow_plan: off\n"
        "allow_merge: off\n"
        "requirements_iterations: 3\n"
        "branch_prefix: shep/\n"
        'worktree_setup_command: ""\n'
        "worktree_setup_timeout: 600\n"
        'test_command: ""\n'
        "test_timeout: 1800\n"
        "merge_hooks: off\n"
        "git_filters: off\n"
    )
    data = json.loads(shep("settings", "show", "--json", check=True).stdout)
    assert {k: data[k] for k in SETTINGS} == {
        "heartbeat_interval": 30.0,
        "agent_timeout": 1800.0,
        "agent_output_mib": 32,
        "orphan_after": 120.0,
        "inbox_notice": False,
        "collaboration": False,
        "notify_command": command,
        "notify_timeout": 30.0,
        "feature_fast": False,
        "allow_prd": False,
        "allow_plan": False,
        "allow_merge": False,
        "requirements_iterations": 3,
        "branch_prefix": "shep/",
        "worktree_setup_command": "",
        "worktree_setup_timeout": 600.0,
        "test_command": "",
        "test_timeout": 1800.0,
        "merge_hooks": False,
        "git_filters": False,
    }


def test_set_refuses_a_bad_flag_in_one_line(shep_home: Path) -> None:
    """A word that is not on/off: one line on stderr, exit 2, nothing recorded."""
    result = shep("settings", "set", "inbox_notice", "sometimes")
    assert (result.returncode, result.stdout, result.stderr) == (
        2,
        "",
        "shep: inbox_notice is on or off (or true/false, yes/no, 1/0), not 'sometimes'.\n",
    )
    assert json.loads(shep("settings", "show", "--json", check=True).stdout)["inbox_notice"]


def test_set_warns_when_the_notify_program_is_not_found(shep_home: Path) -> None:
    """A program not on PATH is recorded (a worker may see another PATH), with a warning."""
    result = shep("settings", "set", "notify_command", "no-such-notifier-xyz --flag")
    assert (result.returncode, result.stdout) == (
        0,
        "notify_command = no-such-notifier-xyz --flag\n",
    )
    assert result.stderr == (
        "shep: warning: 'no-such-notifier-xyz' is not an executable found on PATH here; "
        "notifications will fail (and say so in `shep logs`) until it is.\n"
    )


def test_bad_recorded_flag_and_text_are_skipped(store: EventStore) -> None:
    """Records an older shep could have made (any text) are skipped, and show says how to fix."""
    record_unchecked(
        store,
        ("inbox_notice", "off"),
        ("inbox_notice", "maybe"),
        ("notify_command", "x 'y"),
    )
    folded = load_settings(store)
    assert folded.flags["inbox_notice"] is False
    assert folded.texts["notify_command"] == ""
    shown = shep("settings", "show")
    assert shown.returncode == 0
    assert shown.stderr == (
        "shep: ignoring a recorded setting: inbox_notice is on or off (or true/false, yes/no, "
        "1/0), not 'maybe'. It stays off; change it with `shep settings set inbox_notice "
        "on|off`.\n"
        "shep: ignoring a recorded setting: notify_command is not a valid command line (No "
        'closing quotation): quote it as a shell would, not "x \'y". It stays ""; change '
        "it with `shep settings set notify_command 'COMMAND ARG...'`.\n"
    )


def test_cheap_reader_agrees_with_the_fold(store: EventStore, db_path: Path) -> None:
    """read_setting_values (apsw only) gives what load_settings gives, for every kind."""
    record_unchecked(
        store,
        ("inbox_notice", "no"),
        ("notify_command", "notify-me"),
        ("notify_timeout", "1e9"),
        ("notify_timeout", "42"),
        ("colour", "blue"),
    )
    conn = apsw.Connection(str(db_path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        cheap = read_setting_values(conn)
    finally:
        conn.close()
    full = load_settings(store)
    assert (cheap.values, cheap.flags, cheap.texts) == (full.values, full.flags, full.texts)
    assert cheap.every() == full.every()
    assert (cheap.flags["inbox_notice"], cheap.values["notify_timeout"]) == (False, 42.0)


def test_inbox_notice_is_printed_until_turned_off(store: EventStore) -> None:
    """A pending item: every command prints the notice; `inbox_notice off` silences it."""
    waiting_run(store)
    assert shep("status").stderr == NOTICE
    shep("settings", "set", "inbox_notice", "off", check=True)
    assert shep("status").stderr == ""
    shep("settings", "set", "inbox_notice", "yes", check=True)
    assert shep("status").stderr == NOTICE


@pytest.mark.parametrize("notice", ["on", "off"])
def test_status_reads_inbox_notice_without_eventsourcing(store: EventStore, notice: str) -> None:
    """With an item pending, `shep status` reads inbox_notice and imports no heavy module."""
    waiting_run(store)
    change_setting(store, key="inbox_notice", value=notice, changed_by="me")
    code = (
        "import sys\n"
        "from shep.cli import main\n"
        "code = None\n"
        "try:\n    main(['status'])\nexcept SystemExit as e:\n    code = e.code\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('langgraph', 'prompt_toolkit', 'eventsourcing'))\n"
        "print(f'EXIT={code} HEAVY=' + ','.join(heavy), file=sys.stderr)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=False,
        env=os.environ.copy(),
    )
    expected = NOTICE if notice == "on" else ""
    assert result.stderr == expected + "EXIT=None HEAVY=\n"
