"""Run the real CLI as a subprocess, the way a user does."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping


def shep(
    *args: str, env: Mapping[str, str] | None = None, timeout: float = 60, check: bool = False
) -> subprocess.CompletedProcess[str]:
    """``python -m shep ARGS`` with the test's SHEP_HOME; never inherits a terminal."""
    full_env = {**os.environ, **(env or {})}
    result = subprocess.run(
        [sys.executable, "-m", "shep", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"shep {' '.join(args)} failed: {result.stderr}")
    return result
