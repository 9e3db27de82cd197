"""A SHEP_HOME no command can use (a file; a directory this user may not enter): every
command says so in the same one line and exits non-zero; a missing one is still empty."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import shep

#: Reading, listing, writing, auditing and rebuilding commands: each reaches the home its
#: own way, and all must agree on what is wrong with it.
COMMANDS = [
    ["status", "--json"],
    ["status"],
    ["inbox", "--json"],
    ["inbox"],
    ["feat", "ls", "--json"],
    ["logs", "nope"],
    ["supervisor", "show"],
    ["audit", "verify"],
    ["audit", "export"],
    ["projections", "rebuild"],
    ["settings", "show"],
    ["doctor"],
]


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_a_home_that_is_a_file_is_one_line_for_every_command(
    shep_home: Path, args: list[str]
) -> None:
    """SHEP_HOME naming a regular file: not an empty inbox or policy, not "does not
    exist", but one line saying it is not a directory, exit 2; the file is left as it is."""
    shep_home.write_text("not a home\n")
    done = shep(*args)
    assert (done.returncode, done.stdout) == (2, ""), done.stdout
    assert done.stderr == (
        f"shep: SHEP_HOME {shep_home} is not a directory. Point SHEP_HOME at a directory.\n"
    )
    assert shep_home.read_text() == "not a home\n"


def test_version_names_a_home_that_is_a_file(shep_home: Path) -> None:
    """`shep --version` still prints shep's versions, and says why the store's are unknown."""
    shep_home.write_text("")
    done = shep("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[2] == (
        f"store: cannot tell: SHEP_HOME {shep_home} is not a directory. "
        "Point SHEP_HOME at a directory."
    )


@pytest.mark.parametrize("args", [["inbox", "--json"], ["feat", "ls", "--json"]])
def test_a_missing_home_is_still_empty(shep_home: Path, args: list[str]) -> None:
    """A SHEP_HOME that does not exist yet is an empty result, not an error."""
    done = shep(*args)
    assert (done.returncode, done.stdout, done.stderr) == (0, "[]\n", "")
    assert not shep_home.exists()


def _without_overrides(args: list[str]) -> subprocess.CompletedProcess[str]:
    """``shep ARGS`` as a user the directory's mode applies to: as root, with the
    capabilities that override file modes dropped (capsh)."""
    command = [sys.executable, "-m", "shep", *args]
    if os.geteuid() == 0:
        capsh = shutil.which("capsh")
        if capsh is None:
            pytest.skip("root, and no capsh to drop the capabilities that override modes")
        drop = "--drop=cap_dac_override,cap_dac_read_search"
        command = [capsh, drop, "--", "-c", f"exec {shlex.join(command)}"]
    return subprocess.run(
        command, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60, check=False
    )


@pytest.mark.parametrize("args", [["status"], ["inbox", "--json"], ["logs", "nope"]])
def test_a_home_that_cannot_be_entered_is_named(shep_home: Path, args: list[str]) -> None:
    """A home of mode 000: the directory is what cannot be opened, not a file in it
    (`store`, the shared store's URL, which a home without one does not even have)."""
    shep_home.mkdir(mode=0o700)
    shep_home.chmod(0)
    try:
        done = _without_overrides(args)
    finally:
        shep_home.chmod(0o700)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        f"shep: Cannot open SHEP_HOME {shep_home} (Permission denied, mode 0000). "
        f"Make it yours (chmod u+rwx {shep_home}), or point SHEP_HOME elsewhere.\n"
    )
