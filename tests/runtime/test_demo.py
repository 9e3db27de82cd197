"""`shep demo`: a first run with no agent CLI, in a temporary home."""

from __future__ import annotations

import re
from pathlib import Path

from tests.e2e.cli import shep


def test_demo_runs_end_to_end_in_its_own_home(shep_home: Path) -> None:
    """The demo analyzes the sample repository, shows status and logs, and leaves
    the user's own SHEP_HOME untouched."""
    result = shep("demo", "--delay", "0", timeout=120)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "DEMO agent (canned answers, not an AI)" in out
    assert "$ shep status" in out
    assert "run.completed" in out
    report = Path(re.search(r"The report is (\S+)\.", out).group(1))  # type: ignore[union-attr]
    assert report.read_text().startswith("# Repository analysis: inventory")
    assert "demo agent" in report.read_text()
    assert not shep_home.exists()
    demo_home = report.parent.parent
    verify = shep("audit", "verify", env={"SHEP_HOME": str(demo_home)})
    assert verify.returncode == 0
    assert verify.stdout.startswith("OK: ")
