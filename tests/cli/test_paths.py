"""Paths that are not valid UTF-8 (a SHEP_HOME, a repository) are refused in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.shep.runs.conftest import agent_log, fake_claude, repo
from tests.support.cli import shep

__all__ = ["agent_log", "fake_claude", "repo"]  # fixtures this module uses

BAD_NAME = b"bad\xff"


def shep_bytes(
    *args: bytes, env: dict[bytes, bytes] | None = None, cwd: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    """``python -m shep ARGS`` with argv and environment as raw bytes, as a shell passes them."""
    return subprocess.run(
        [os.fsencode(sys.executable), b"-m", b"shep", *args],
        capture_output=True,
        env={**os.environb, **(env or {})},
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        timeout=60,
        check=False,
    )


@pytest.fixture
def bad_dir(tmp_path: Path) -> bytes:
    """An existing directory whose name is not valid UTF-8."""
    path = os.fsencode(tmp_path) + b"/" + BAD_NAME
    os.mkdir(path)
    return path


def home_refusal(home: bytes) -> bytes:
    return (
        f"shep: SHEP_HOME {home!r} is not valid UTF-8. "
        "Point SHEP_HOME at a directory whose path is valid UTF-8.\n"
    ).encode()


@pytest.mark.parametrize("exists", [True, False], ids=["existing", "missing"])
@pytest.mark.parametrize(
    "args",
    [[b"status"], [b"status", b"--json"], [b"logs", b"deadbeef"], [b"settings", b"show"]],
)
def test_non_utf8_shep_home_is_refused(bad_dir: bytes, exists: bool, args: list[bytes]) -> None:
    """SHEP_HOME with bytes that are not UTF-8: one line naming it (bytes escaped) and the fix,
    exit 2, and nothing is created there."""
    home = bad_dir + b"/home" if exists else bad_dir + b"/missing/home"
    if exists:
        os.mkdir(home)
    result = shep_bytes(*args, env={b"SHEP_HOME": home})
    assert result.returncode == 2
    assert result.stdout == b""
    assert result.stderr == home_refusal(home)
    assert os.listdir(home) == [] if exists else not os.path.exists(home)


def test_non_utf8_default_home_is_refused(bad_dir: bytes) -> None:
    """Without SHEP_HOME, a HOME that is not UTF-8 gives the same refusal for ~/.shep."""
    env = {k: v for k, v in os.environb.items() if k != b"SHEP_HOME"}
    env[b"HOME"] = bad_dir
    result = subprocess.run(
        [os.fsencode(sys.executable), b"-m", b"shep", b"status"],
        capture_output=True,
        env=env,
        stdin=subprocess.DEVNULL,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr == home_refusal(bad_dir + b"/.shep")
    assert os.listdir(bad_dir) == []


def repo_refusal(path: bytes) -> bytes:
    return (
        f"shep: Repository {path!r} is not valid UTF-8. "
        "Rename it (or the directory holding it) so that its path is valid UTF-8.\n"
    ).encode()


def test_non_utf8_repository_is_refused(bad_dir: bytes, fake_claude: Path) -> None:
    """`shep run --repo PATH` with a path that is not UTF-8: one line naming it, exit 2,
    and no run is created."""
    result = shep_bytes(b"run", b"analyze-repository", b"--repo", bad_dir)
    assert result.returncode == 2
    assert result.stdout == b""
    assert result.stderr == repo_refusal(bad_dir)
    assert json.loads(shep("status", "--all", "--json", check=True).stdout) == []


def test_non_utf8_working_directory_is_refused(bad_dir: bytes, fake_claude: Path) -> None:
    """`shep run` in a directory whose path is not UTF-8 (the default --repo .) is refused too."""
    result = shep_bytes(b"run", b"analyze-repository", cwd=bad_dir)
    assert result.returncode == 2
    assert result.stderr == repo_refusal(bad_dir)


def test_agent_binary_path_not_utf8_is_refused(tmp_path: Path) -> None:
    """`settings agent --binary` with a non-UTF-8 path: one line, exit 2, nothing recorded."""
    bad = os.path.join(os.fsencode(tmp_path), b"claude\xff")
    result = subprocess.run(
        [os.fsencode(sys.executable), b"-m", b"shep", b"settings", b"agent", b"--agent",
         b"claude-code", b"--binary", bad],
        capture_output=True,
        timeout=60,
        check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.decode() == (
        f"shep: Binary {bad!r} is not valid UTF-8. Rename it, or link to it from a path "
        "that is valid UTF-8.\n"
    )


def test_demo_with_a_tmpdir_not_utf8_is_refused(tmp_path: Path) -> None:
    """`shep demo` with TMPDIR not valid UTF-8: one line, exit 1, no traceback."""
    bad = os.path.join(os.fsencode(tmp_path), b"tmp\xff")
    os.mkdir(bad)
    env = {**os.environb, b"TMPDIR": bad}
    result = subprocess.run(
        [os.fsencode(sys.executable), b"-m", b"shep", b"demo"],
        capture_output=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert result.stderr.decode() == (
        f"shep: The temporary directory {bad!r} is not valid UTF-8. Point TMPDIR at a "
        "directory whose path is valid UTF-8.\n"
    )
