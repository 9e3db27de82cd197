"""A relative SHEP_HOME names one home, whatever directory a worker runs in."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from shep.demo import SAMPLE_REPO


def _shep(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shep", *args],
        cwd=cwd,
        env={**os.environ, "SHEP_HOME": "h", "SHEP_DEMO_DELAY": "0"},
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def test_a_relative_shep_home_serves_a_background_run(tmp_path: Path) -> None:
    """SHEP_HOME=h, resolved against the directory shep was started in, is the home the
    background worker uses too: the run completes in ./h/shep.db (no ./h/h is made) and
    the report is written; `shep status` from the same directory shows it completed.
    """
    repo = tmp_path / "inventory"
    subprocess.run(["cp", "-r", str(SAMPLE_REPO), str(repo)], check=True)
    assert _shep(tmp_path, "settings", "agent", "--agent", "demo").returncode == 0
    started = _shep(tmp_path, "run", "analyze-repository", "--repo", "inventory", "--background")
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.strip()
    deadline = time.monotonic() + 60
    while True:
        listed = _shep(tmp_path, "status", run_id, "--json")
        assert listed.returncode == 0, listed.stderr
        status = json.loads(listed.stdout)["status"]
        if status not in ("pending", "running") or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    log = (tmp_path / "h" / "logs" / f"{run_id}.log").read_text()
    assert status == "completed", log
    assert not (tmp_path / "h" / "h").exists()
    assert (repo / "shep-analysis.md").is_file()
