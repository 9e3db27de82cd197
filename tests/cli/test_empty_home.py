"""The read commands on an empty shep home: lists are empty, single runs are not found."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import shep

EMPTY_HOMES = ["missing", "no-database"]


@pytest.fixture(params=EMPTY_HOMES)
def empty_home(request: pytest.FixtureRequest, shep_home: Path) -> Path:
    """SHEP_HOME that does not exist yet, or exists without a shep.db."""
    if request.param == "no-database":
        shep_home.mkdir(mode=0o700)
    return shep_home


@pytest.mark.parametrize("args", [["status", "--json"], ["status", "--all", "--json"]])
def test_json_lists_are_empty_on_an_empty_home(empty_home: Path, args: list[str]) -> None:
    """`shep status --json` (with or without --all) prints `[]` and exits 0 on an empty home."""
    result = shep(*args)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "[]\n"
    assert result.stderr == ""
    assert json.loads(result.stdout) == []


def test_status_table_on_an_empty_home_says_where_to_start(empty_home: Path) -> None:
    """Without --json, an empty home is one line pointing at the first command: an empty
    result, not an error, so exit 0 (as `shep inbox` says the inbox is empty).
    """
    result = shep("status")
    assert result.returncode == 0, result.stderr
    assert result.stdout == (
        "No runs yet. Start one with `shep run analyze-repository`, or try `shep demo`.\n"
    )
    assert result.stderr == ""


@pytest.mark.parametrize(
    "args",
    [
        ["status", "deadbeef", "--json"],
        ["logs", "deadbeef", "--json"],
        ["logs", "deadbeef", "--json", "--follow"],
    ],
)
def test_one_run_on_an_empty_home_is_not_found(empty_home: Path, args: list[str]) -> None:
    """Asking for one run on an empty home is still `run not found`: one line, exit 2."""
    result = shep(*args)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == "shep: No run 'deadbeef'. List runs with `shep status --all`.\n"


def test_settings_show_json_on_an_empty_home(empty_home: Path) -> None:
    """`shep settings show --json` (an object, not a list) works on an empty home: no agent."""
    result = shep("settings", "show", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["agent_type"] is None
