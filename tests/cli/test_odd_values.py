"""Odd values a user can type: never an internal error, never a stuck state."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from tests.support.cli import shep


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (("run", "analyze-repository", "--timeout", "nan"), "--timeout"),
        (("run", "analyze-repository", "--timeout", "inf"), "--timeout"),
        (("resume", "abc", "--timeout", "-1"), "--timeout"),
        (("cancel", "abc", "--grace", "nan"), "--grace"),
    ],
)
def test_non_finite_durations_are_refused(args: tuple[str, ...], option: str) -> None:
    """nan, inf and negative durations are a usage error (exit 2), like any bad option value."""
    result = shep(*args)
    assert result.returncode == 2
    assert f"Invalid value for '{option}'" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_damaged_secrets_file_is_repaired_by_configuring_again(shep_home: Path) -> None:
    """The error for a damaged secrets file says to configure the token again: storing a
    token then works (it used to fail on the same damaged file), and the damaged file is
    kept aside (0600) rather than lost.
    """
    shep_home.mkdir(mode=0o700, parents=True, exist_ok=True)
    secrets = shep_home / "secrets"
    secrets.write_text("{not json")
    secrets.chmod(0o600)
    from shep.home.secrets import load_token, save_token

    save_token(shep_home, "claude-code", "sk-new")
    assert load_token(shep_home, "claude-code") == "sk-new"
    damaged = shep_home / "secrets.damaged"
    assert damaged.read_text() == "{not json"
    assert stat.S_IMODE(damaged.stat().st_mode) == 0o600
