"""Plain settings are finite, within bounds, and agree with each other; bad old records are skipped.

An older shep recorded any float (``nan``, ``inf``, ``1e30``): those records
must never stop a command, least of all the one that repairs the setting.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from uuid import UUID

import apsw
import pytest

from commands.create_run import create_run
from commands.record_heartbeat import record_heartbeat
from commands.start_run import start_run
from events.base import utc_now
from events.settings import SETTINGS_STREAM_ID, SettingChanged
from events.store import EventStore
from shep.home.identity import host_name
from shep.home.settings import load_settings
from shep.runs.recovery import orphan_after
from tests.support.cli import shep


def record_unchecked(store: EventStore, *changes: tuple[str, str]) -> None:
    """Append setting changes the way shep did before values were checked."""
    version = store.stream_version(SETTINGS_STREAM_ID)
    store.append(
        [
            SettingChanged(
                originator_id=SETTINGS_STREAM_ID,
                originator_version=version + n,
                timestamp=utc_now(),
                key=key,
                value=value,
                changed_by="older-shep@host",
            )
            for n, (key, value) in enumerate(changes, start=1)
        ]
    )


def live_run(store: EventStore) -> UUID:
    """A running run whose worker (this test process) is alive and has just beaten.

    Every command then reads ``orphan_after`` to judge it, and none marks it.
    """
    run_id = create_run(
        store, workflow="wf", agent_type="demo", repo="/r", node_names=["a"], created_by="me"
    )
    start_run(store, run_id, pid=os.getpid(), host=host_name())
    record_heartbeat(store, run_id, pid=os.getpid(), host=host_name())
    return run_id


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("orphan_after", "nan", "orphan_after must be between 10 and 604800 seconds, not 'nan'."),
        ("orphan_after", "1e9", "orphan_after must be between 10 and 604800 seconds, not '1e9'."),
        (
            "heartbeat_interval",
            "inf",
            "heartbeat_interval must be between 0.1 and 3600 seconds, not 'inf'.",
        ),
        (
            "heartbeat_interval",
            "0.01",
            "heartbeat_interval must be between 0.1 and 3600 seconds, not '0.01'.",
        ),
        (
            "agent_timeout",
            "-inf",
            "agent_timeout must be between 1 and 604800 seconds, not '-inf'.",
        ),
        ("agent_timeout", "0", "agent_timeout must be between 1 and 604800 seconds, not '0'."),
        ("agent_timeout", "-5", "agent_timeout must be between 1 and 604800 seconds, not '-5'."),
    ],
)
def test_set_refuses_non_finite_and_out_of_bounds(
    shep_home: Path, key: str, value: str, message: str
) -> None:
    """`settings set` refuses nan, inf and values out of bounds: one line, exit 2, nothing kept."""
    result = shep("settings", "set", key, value)
    assert (result.returncode, result.stdout, result.stderr) == (2, "", f"shep: {message}\n")
    shown = json.loads(shep("settings", "show", "--json", check=True).stdout)
    assert (shown["heartbeat_interval"], shown["agent_timeout"], shown["orphan_after"]) == (
        30.0,
        1800.0,
        120.0,
    )


def test_bounds_are_inclusive(shep_home: Path) -> None:
    """The documented bounds themselves are accepted."""
    assert shep("settings", "set", "orphan_after", "604800", check=True).stdout == (
        "orphan_after = 604800\n"
    )
    assert shep("settings", "set", "heartbeat_interval", "3600", check=True).stdout == (
        "heartbeat_interval = 3600\n"
    )
    assert shep("settings", "set", "heartbeat_interval", "0.1", check=True).stdout == (
        "heartbeat_interval = 0.1\n"
    )
    assert shep("settings", "set", "orphan_after", "10", check=True).stdout == (
        "orphan_after = 10\n"
    )
    assert shep("settings", "set", "agent_timeout", "1", check=True).stdout == (
        "agent_timeout = 1\n"
    )


def test_heartbeat_interval_stays_under_a_third_of_orphan_after(shep_home: Path) -> None:
    """Either setting is checked against the other's current value; the message says the fix."""
    too_slow = shep("settings", "set", "heartbeat_interval", "41")
    assert (too_slow.returncode, too_slow.stderr) == (
        2,
        "shep: heartbeat_interval 41 is more than a third of orphan_after (120): a live run "
        "could be taken for an orphan. Set heartbeat_interval to at most 40, "
        "or raise orphan_after first.\n",
    )
    assert shep("settings", "set", "heartbeat_interval", "40", check=True).stdout == (
        "heartbeat_interval = 40\n"
    )
    too_soon = shep("settings", "set", "orphan_after", "119")
    assert (too_soon.returncode, too_soon.stderr) == (
        2,
        "shep: orphan_after 119 is less than three times heartbeat_interval (40): a live run "
        "could be taken for an orphan. Set orphan_after to at least 120, "
        "or lower heartbeat_interval first.\n",
    )
    shown = json.loads(shep("settings", "show", "--json", check=True).stdout)
    assert (shown["heartbeat_interval"], shown["orphan_after"]) == (40.0, 120.0)


def test_bad_recorded_values_do_not_stop_commands(store: EventStore) -> None:
    """nan/inf recorded by an older shep: every command still runs and the setting can be fixed.

    The bad records are skipped (the default stays), `settings show` says so on
    stderr, and `settings set` repairs them.
    """
    live_run(store)
    record_unchecked(
        store,
        ("orphan_after", "nan"),
        ("heartbeat_interval", "nan"),
        ("agent_timeout", "inf"),
    )
    status = shep("status")
    assert (status.returncode, status.stderr) == (0, "")
    shown = shep("settings", "show", "--json")
    assert shown.returncode == 0
    values = json.loads(shown.stdout)
    assert (values["heartbeat_interval"], values["agent_timeout"], values["orphan_after"]) == (
        30.0,
        1800.0,
        120.0,
    )
    assert shown.stderr == (
        "shep: ignoring a recorded setting: orphan_after must be between 10 and 604800 "
        "seconds, not 'nan'. It stays 120; change it with `shep settings set orphan_after "
        "SECONDS`.\n"
        "shep: ignoring a recorded setting: heartbeat_interval must be between 0.1 and 3600 "
        "seconds, not 'nan'. It stays 30; change it with `shep settings set "
        "heartbeat_interval SECONDS`.\n"
        "shep: ignoring a recorded setting: agent_timeout must be between 1 and 604800 "
        "seconds, not 'inf'. It stays 1800; change it with `shep settings set agent_timeout "
        "SECONDS`.\n"
    )
    fixed = shep("settings", "set", "orphan_after", "300")
    assert (fixed.returncode, fixed.stdout, fixed.stderr) == (0, "orphan_after = 300\n", "")
    shown = shep("settings", "show", "--json")
    assert json.loads(shown.stdout)["orphan_after"] == 300.0
    assert "orphan_after" not in shown.stderr
    assert shown.stderr.count("\n") == 2


def test_both_readers_agree_on_any_recorded_history(store: EventStore, db_path: Path) -> None:
    """The orphan check's cheap reader and the settings fold skip the same records.

    Random histories of valid, invalid and conflicting values, as an older shep
    could have recorded them; neither reader raises, and both give the same
    orphan_after.
    """
    rng = random.Random(13)
    texts = ["nan", "inf", "-inf", "-1", "0", "abc", "1e30", "5", "10", "45", "90", "120", "300"]
    keys = ["orphan_after", "heartbeat_interval", "agent_timeout", "colour"]
    conn = apsw.Connection(str(db_path), flags=apsw.SQLITE_OPEN_READONLY)
    seen = set()
    for _ in range(60):
        record_unchecked(store, *[(rng.choice(keys), rng.choice(texts)) for _ in range(3)])
        fold = load_settings(store).values
        assert orphan_after(conn) == fold["orphan_after"]
        assert fold["heartbeat_interval"] * 3 <= fold["orphan_after"]
        seen.add(fold["orphan_after"])
    conn.close()
    assert len(seen) > 2


def test_status_reads_orphan_after_without_eventsourcing(store: EventStore) -> None:
    """With a running run the orphan check reads the settings, still without eventsourcing."""
    live_run(store)
    record_unchecked(store, ("orphan_after", "nan"), ("orphan_after", "600"))
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
    assert result.stderr == "EXIT=None HEAVY=\n"
