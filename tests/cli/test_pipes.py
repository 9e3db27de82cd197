"""A reader that goes away (`shep ... | head -1`) is not an error: exit 0, nothing on stderr."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def _into_a_closed_pipe(*args: str) -> subprocess.CompletedProcess[bytes]:
    """``shep ARGS`` writing into a pipe nobody reads any more: its first write breaks it."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(
            [sys.executable, "-m", "shep", *args],
            stdout=write,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write)


@pytest.mark.parametrize(
    "args",
    [("settings", "flags"), ("settings", "flags", "--json"), ("audit", "export")],
    ids=["text", "json", "export"],
)
def test_a_reader_that_left_is_no_error(shep_home: Path, args: tuple[str, ...]) -> None:
    """click turns a broken pipe into exit 1; shep says nothing and exits 0."""
    shep_home.mkdir()
    done = _into_a_closed_pipe(*args)
    assert (done.returncode, done.stderr) == (0, b"")
