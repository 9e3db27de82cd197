"""The feature workflow's settings, and `shep settings workflow` that shows and sets them together.

Ten plain settings (flags, a count, texts, seconds) go through the one
machinery every setting uses: one check when set, one fold for every reader,
bad records skipped. `settings workflow` records through `change_setting`,
like `settings set`, after checking every option it was given.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import apsw
import pytest

from commands.configure_agent import change_setting
from events.setting_values import (
    SETTINGS,
    WEEK,
    WORKFLOW_SETTINGS,
    CountSetting,
    InvalidSettingError,
    SettingValues,
    checked_value,
    default_values,
    record_value,
    show_value,
)
from events.settings import SETTINGS_STREAM_ID, SettingChanged
from events.store import EventStore
from shep.home.settings import load_settings, read_setting_values
from tests.shep.home.test_setting_bounds import record_unchecked
from tests.support.cli import shep

DEFAULTS = {
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

SHOWN_DEFAULTS = (
    "feature_fast             off    "
    "(`shep feat new` implements straight from the description unless --no-fast)\n"
    "allow_prd                off    (skip the feature workflow's PRD approval gate)\n"
    "allow_plan               off    (skip the feature workflow's plan approval gate)\n"
    "allow_merge              off    (skip the feature workflow's merge approval gate)\n"
    "requirements_iterations  3      "
    "(rounds of open questions requirements may ask before the run fails)\n"
    "branch_prefix            shep/  (start of each feature branch name)\n"
    "worktree_setup_command   \"\"     (run in each new feature worktree ('': nothing))\n"
    "worktree_setup_timeout   600    (seconds worktree_setup_command may run)\n"
    "test_command             \"\"     (runs a feature's tests ('': shep detects one))\n"
    "test_timeout             1800   (seconds test_command may run)\n"
    "merge_hooks              off    "
    "(run the repository's git hooks when shep merges into your branch)\n"
    "git_filters              off    "
    "(let shep's git run the filter and merge drivers of git's config (git-lfs))\n"
)


def _recorded(store: EventStore) -> list[tuple[str, str]]:
    return [
        (e.key, e.value) for e in store.load(SETTINGS_STREAM_ID) if isinstance(e, SettingChanged)
    ]


def _check(key: str, text: str) -> str:
    return checked_value(default_values(), key, text)


def _refusal(key: str, text: str) -> str:
    with pytest.raises(InvalidSettingError) as caught:
        _check(key, text)
    return str(caught.value)


# --- CountSetting ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("typed", "recorded"),
    [("1", "1"), ("3", "3"), (" 7 ", "7"), ("07", "7"), ("20", "20")],
)
def test_count_is_recorded_as_a_plain_whole_number(typed: str, recorded: str) -> None:
    """A count within its inclusive bounds is recorded as digits, without blanks or leading 0."""
    assert _check("requirements_iterations", typed) == recorded


@pytest.mark.parametrize(
    "text",
    ["0", "21", "3.5", "3.0", "nan", "inf", "", "  ", "-1", "+3", "1e1", "1_0", "three", "\uff13"],
)
def test_count_refuses_anything_but_a_whole_number_in_bounds(text: str) -> None:
    """Fractions, nan, empty, signs, exponents and non-ASCII digits: one line with the bounds."""
    assert _refusal("requirements_iterations", text) == (
        f"requirements_iterations must be a whole number from 1 to 20, not {text!r}."
    )


def test_count_refuses_an_endless_number_quickly() -> None:
    """Thousands of digits are refused by length, never handed to int() (which would raise)."""
    setting = CountSetting(5, 1, 10, "a test count")
    with pytest.raises(InvalidSettingError, match="must be a whole number from 1 to 10"):
        setting.parse("n", "9" * 10_000)


def test_count_is_an_int_and_not_a_flag_in_the_fold() -> None:
    """A count folds into ``counts`` as an int; on/off values stay flags (a bool is an int)."""
    folded = SettingValues()
    folded.put("requirements_iterations", 1)
    folded.put("allow_prd", True)
    assert folded.counts["requirements_iterations"] == 1
    assert folded.flags["allow_prd"] is True
    assert type(folded.get("requirements_iterations")) is int
    assert (record_value(1), show_value(1)) == ("1", "1")


# --- the flags ------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["feature_fast", "allow_prd", "allow_plan", "allow_merge"])
def test_workflow_flags_take_the_flag_words(key: str) -> None:
    """Each workflow flag is an ordinary on/off setting, off by default."""
    assert SETTINGS[key].default is False
    assert (_check(key, "yes"), _check(key, "0")) == ("on", "off")
    assert _refusal(key, "always") == (
        f"{key} is on or off (or true/false, yes/no, 1/0), not 'always'."
    )


# --- branch_prefix --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("typed", "recorded"),
    [
        ("shep/", "shep/"),
        ("  feat/ ", "feat/"),
        ("team/alice/", "team/alice/"),
        ("feature-", "feature-"),
        ("x.", "x."),
        ("v1.2_", "v1.2_"),
        ("a@b/", "a@b/"),
    ],
)
def test_branch_prefix_accepts_a_usable_start_of_a_branch_name(typed: str, recorded: str) -> None:
    """A prefix git accepts in front of a slug (a trailing / or . included) is recorded stripped."""
    assert _check("branch_prefix", typed) == recorded


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "it is empty"),
        ("   ", "it is empty"),
        ("my prefix/", "it contains a blank or a control character"),
        ("a~b", "it contains ~"),
        ("a^b", "it contains ^"),
        ("a:b", "it contains :"),
        ("a?b", "it contains ?"),
        ("a*b", "it contains *"),
        ("a[b", "it contains ["),
        ("a\\b", "it contains \\"),
        ("a:b?", "it contains : ?"),
        ("-x/", "it starts with '-'"),
        ("/x", "it starts with '/'"),
        ("a..b", "it contains '..'"),
        ("a@{b", "it contains '@{'"),
        ("a//b", "it contains '//'"),
        (".hidden/", "a '/'-separated part starts with '.'"),
        ("a/.b", "a '/'-separated part starts with '.'"),
        ("x.lock", "a '/'-separated part ends with '.lock'"),
        ("x.lock/", "a '/'-separated part ends with '.lock'"),
    ],
)
def test_branch_prefix_refuses_what_git_would(text: str, problem: str) -> None:
    """Each git check-ref-format rule a prefix can break is refused, saying which, in one line."""
    assert _refusal("branch_prefix", text) == (
        f"branch_prefix cannot start a git branch name: {problem}, not {text.strip()!r}. "
        "For example: 'shep/'."
    )


def test_branch_prefix_refuses_control_characters_and_length() -> None:
    """A tab or newline, and a prefix longer than 200 characters, are refused like other texts."""
    assert _refusal("branch_prefix", "a\tb") == (
        "branch_prefix must be one line without control characters, not 'a\\tb'."
    )
    assert _refusal("branch_prefix", "p" * 201) == (
        "branch_prefix must be at most 200 characters, not 201."
    )


# --- the commands and the timeouts ----------------------------------------------------------


@pytest.mark.parametrize("key", ["worktree_setup_command", "test_command"])
def test_workflow_commands_are_command_lines(key: str) -> None:
    """A command must be cut into argv as a shell would; empty (the default) is allowed."""
    assert SETTINGS[key].default == ""
    assert _check(key, "  make setup ARGS='a b'  ") == "make setup ARGS='a b'"
    assert _check(key, "") == ""
    assert _refusal(key, "make 'setup") == (
        f"{key} is not a valid command line (No closing quotation): quote it as a shell "
        'would, not "make \'setup".'
    )


@pytest.mark.parametrize(
    ("key", "default"), [("worktree_setup_timeout", 600.0), ("test_timeout", 1800.0)]
)
def test_workflow_timeouts_are_seconds_up_to_a_week(key: str, default: float) -> None:
    """1 s to a week inclusive, recorded as floats; less, more, or nan is refused."""
    assert SETTINGS[key].default == default
    assert (_check(key, "1"), _check(key, f"{WEEK:g}")) == ("1.0", f"{WEEK}")
    for text in ("0.5", "604801", "nan", "-5"):
        assert _refusal(key, text) == (f"{key} must be between 1 and 604800 seconds, not {text!r}.")


# --- the fold -------------------------------------------------------------------------------


def test_fold_exposes_every_workflow_setting_at_its_default(store: EventStore) -> None:
    """Nothing recorded: each kind's dict holds the workflow settings' defaults."""
    settings = load_settings(store)
    assert [k for k in SETTINGS if k in WORKFLOW_SETTINGS] == list(WORKFLOW_SETTINGS)
    assert {k: settings.every()[k] for k in WORKFLOW_SETTINGS} == DEFAULTS
    assert settings.flags["feature_fast"] is False
    assert settings.counts == {"requirements_iterations": 3, "agent_output_mib": 32}
    assert settings.texts["branch_prefix"] == "shep/"
    assert settings.values["test_timeout"] == 1800.0


def test_fold_reads_changes_and_skips_bad_records(store: EventStore, db_path: Path) -> None:
    """Recorded values fold by kind; a bad count record (an older shep's) is skipped, never raised.

    The cheap reader every command runs agrees with the full fold.
    """
    change_setting(store, key="requirements_iterations", value="5", changed_by="me")
    change_setting(store, key="allow_merge", value="on", changed_by="me")
    change_setting(store, key="test_command", value="pytest -q", changed_by="me")
    record_unchecked(
        store,
        ("requirements_iterations", "5.5"),
        ("branch_prefix", "bad prefix"),
        ("worktree_setup_timeout", "1e30"),
    )
    settings = load_settings(store)
    assert settings.counts["requirements_iterations"] == 5
    assert settings.flags["allow_merge"] is True
    assert settings.texts["test_command"] == "pytest -q"
    assert settings.texts["branch_prefix"] == "shep/"
    assert settings.values["worktree_setup_timeout"] == 600.0
    assert [s.key for s in settings.skipped] == [
        "requirements_iterations",
        "branch_prefix",
        "worktree_setup_timeout",
    ]
    conn = apsw.Connection(str(db_path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        cheap = read_setting_values(conn)
    finally:
        conn.close()
    assert cheap.counts == settings.counts
    assert cheap.every() == settings.every()


def test_set_records_a_count_as_digits(store: EventStore) -> None:
    """`settings set` takes the count like any setting, and echoes it as a number."""
    result = shep("settings", "set", "requirements_iterations", "07", check=True)
    assert result.stdout == "requirements_iterations = 7\n"
    assert _recorded(store) == [("requirements_iterations", "7")]
    refused = shep("settings", "set", "requirements_iterations", "-2")
    assert (refused.returncode, refused.stdout, refused.stderr) == (
        2,
        "",
        "shep: requirements_iterations must be a whole number from 1 to 20, not '-2'.\n",
    )


# --- `shep settings workflow` ---------------------------------------------------------------


def test_workflow_shows_each_setting_with_what_it_does(shep_home: Path) -> None:
    """Without options: one aligned `key  value  (what it does)` line per workflow setting."""
    result = shep("settings", "workflow", check=True)
    assert (result.stdout, result.stderr) == (SHOWN_DEFAULTS, "")


def test_workflow_json_is_typed(shep_home: Path) -> None:
    """--json: an object of the ten settings, in order, flags as booleans, the count an int."""
    data = json.loads(shep("settings", "workflow", "--json", check=True).stdout)
    assert list(data) == list(WORKFLOW_SETTINGS)
    assert data == DEFAULTS
    assert type(data["requirements_iterations"]) is int


def test_workflow_sets_several_at_once(store: EventStore) -> None:
    """Each option given is recorded, normalized like `settings set`, in the settings' order."""
    result = shep(
        "settings",
        "workflow",
        "--test-timeout",
        "90",
        "--fast",
        "--requirements-iterations",
        "5",
        "--branch-prefix",
        "feat/",
        "--setup-command",
        "npm ci --prefer-offline",
        "--setup-timeout",
        "60",
        "--test-command",
        "npm test",
        "--allow-plan",
    )
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == (
        "feature_fast = on\n"
        "allow_plan = on\n"
        "requirements_iterations = 5\n"
        "branch_prefix = feat/\n"
        "worktree_setup_command = npm ci --prefer-offline\n"
        "worktree_setup_timeout = 60\n"
        "test_command = npm test\n"
        "test_timeout = 90\n"
    )
    assert _recorded(store) == [
        ("feature_fast", "on"),
        ("allow_plan", "on"),
        ("requirements_iterations", "5"),
        ("branch_prefix", "feat/"),
        ("worktree_setup_command", "npm ci --prefer-offline"),
        ("worktree_setup_timeout", "60.0"),
        ("test_command", "npm test"),
        ("test_timeout", "90.0"),
    ]
    settings = load_settings(store)
    assert settings.counts["requirements_iterations"] == 5
    assert (settings.flags["allow_plan"], settings.flags["allow_prd"]) == (True, False)
    turned_off = shep("settings", "workflow", "--no-fast", "--setup-command", "", check=True)
    assert turned_off.stdout == 'feature_fast = off\nworktree_setup_command = ""\n'
    assert load_settings(store).texts["worktree_setup_command"] == ""


def test_workflow_records_what_settings_set_records(store: EventStore) -> None:
    """The same value through `settings workflow` and `settings set` makes the same event."""
    shep("settings", "workflow", "--setup-timeout", "45", "--no-allow-merge", check=True)
    shep("settings", "set", "worktree_setup_timeout", "45", check=True)
    shep("settings", "set", "allow_merge", "off", check=True)
    events = [e for e in store.load(SETTINGS_STREAM_ID) if isinstance(e, SettingChanged)]
    by_workflow, by_set = events[:2], events[2:]
    assert [(e.key, e.value, e.changed_by) for e in by_workflow] == [
        (e.key, e.value, e.changed_by) for e in reversed(by_set)
    ]


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (
            ["--requirements-iterations", "3.5"],
            "requirements_iterations must be a whole number from 1 to 20, not '3.5'.",
        ),
        (
            ["--requirements-iterations", "-1"],
            "requirements_iterations must be a whole number from 1 to 20, not '-1'.",
        ),
        (
            ["--branch-prefix", "my branch/"],
            "branch_prefix cannot start a git branch name: it contains a blank or a control "
            "character, not 'my branch/'. For example: 'shep/'.",
        ),
        (
            ["--test-command", "pytest 'x"],
            "test_command is not a valid command line (No closing quotation): quote it as a "
            'shell would, not "pytest \'x".',
        ),
        (
            ["--setup-timeout", "0"],
            "worktree_setup_timeout must be between 1 and 604800 seconds, not '0'.",
        ),
    ],
)
def test_workflow_records_nothing_when_one_value_is_bad(
    store: EventStore, bad: list[str], message: str
) -> None:
    """A bad value among good ones: one stderr line, exit 2, and not one of them recorded."""
    result = shep("settings", "workflow", "--fast", "--allow-all", "--test-timeout", "90", *bad)
    assert (result.returncode, result.stdout, result.stderr) == (2, "", f"shep: {message}\n")
    assert _recorded(store) == []


def test_allow_all_sets_the_three_gates_and_their_own_options_win(store: EventStore) -> None:
    """--allow-all turns the three gates on, --no-allow-all off; a gate's own option overrides."""
    result = shep("settings", "workflow", "--allow-all", check=True)
    assert result.stdout == "allow_prd = on\nallow_plan = on\nallow_merge = on\n"
    flags = load_settings(store).flags
    assert (flags["allow_prd"], flags["allow_plan"], flags["allow_merge"]) == (True, True, True)
    mixed = shep("settings", "workflow", "--no-allow-all", "--allow-merge", check=True)
    assert mixed.stdout == "allow_prd = off\nallow_plan = off\nallow_merge = on\n"
    flags = load_settings(store).flags
    assert (flags["allow_prd"], flags["allow_plan"], flags["allow_merge"]) == (False, False, True)
    assert flags["feature_fast"] is False


def test_workflow_json_after_setting_prints_every_workflow_setting(store: EventStore) -> None:
    """--json with options records them, then prints all ten settings as JSON."""
    result = shep("settings", "workflow", "--json", "--requirements-iterations", "9", check=True)
    assert json.loads(result.stdout) == {**DEFAULTS, "requirements_iterations": 9}


def test_workflow_warns_about_a_skipped_record(store: EventStore) -> None:
    """A recorded workflow value that breaks the rules is named on stderr, with the repair."""
    record_unchecked(store, ("requirements_iterations", "nan"))
    result = shep("settings", "workflow", check=True)
    assert result.stdout == SHOWN_DEFAULTS
    assert result.stderr == (
        "shep: ignoring a recorded setting: requirements_iterations must be a whole number "
        "from 1 to 20, not 'nan'. It stays 3; change it with "
        "`shep settings set requirements_iterations N`.\n"
    )


def test_workflow_imports_no_heavy_module(shep_home: Path) -> None:
    """Showing the workflow settings loads neither langgraph nor prompt-toolkit.

    The settings modules are imported by every command; they must stay cheap.
    """
    code = (
        "import sys\n"
        "from shep.cli import main\n"
        "try:\n    main(['settings', 'workflow', '--json'])\nexcept SystemExit:\n    pass\n"
        "import events.setting_values, shep.home.settings\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('langgraph', 'prompt_toolkit'))\n"
        "print('HEAVY=' + ','.join(heavy), file=sys.stderr)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=False,
        env=os.environ.copy(),
    )
    assert result.stderr == "HEAVY=\n"
