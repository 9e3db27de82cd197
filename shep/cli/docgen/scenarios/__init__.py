"""The stories the pages tell, played with the real CLI: one module per scenario.

Each module has ``play(scratch, transcript)``, and may have ``DISPLAY_ROOT``
(how the scratch directory is shown) and ``missing()`` (what the machine
lacks to play it). Helpers shared by several stories are here.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

from shep.cli.docgen.reference import CLONE
from shep.cli.docgen.scratch import ScenarioError, Scratch, Shown

#: tests' fake ``claude`` (stream-json, canned answers) and their test workflows.
FAKE_CLAUDE = CLONE / "tests" / "shep" / "runs" / "fake_claude.py"
TEST_WORKFLOWS = "tests.support.workflows"

_RUN_ID = re.compile(r"^[0-9a-f]{32}$", re.MULTILINE)


def git_repo(scratch: Scratch, path: Path, files: dict[str, str] | None = None) -> Path:
    """A git repository at ``path`` with ``files`` in one commit on ``main``."""
    path.mkdir(parents=True)
    for name, content in (files or {"app.py": "print('hello')\n"}).items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(content)
    scratch.out("git init -q && git add -A && git commit -q -m 'First commit'", cwd=path)
    return path


def sample_repo(scratch: Scratch, path: Path) -> Path:
    """A copy of shep's bundled sample repository (``inventory``), committed."""
    source = CLONE / "shep" / "demo" / "sample_repo"
    shutil.copytree(source, path, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    scratch.out("git init -q && git add -A && git commit -q -m 'Inventory sample'", cwd=path)
    return path


def run_id(shown: Shown) -> str:
    """The run id a ``--background`` command printed on a line of its own."""
    found = _RUN_ID.search(shown.output)
    if found is None:
        raise ScenarioError(f"`{shown.command}` printed no run id:\n{shown.output}")
    return found.group()


def pending(scratch: Scratch, run: str | None = None, **options: Any) -> list[dict[str, Any]]:
    """The inbox (of one run) as ``shep inbox --json`` gives it, read without being shown."""
    command = "shep inbox --json 2>/dev/null" + (f" --run {run}" if run else "")
    items: list[dict[str, Any]] = json.loads(scratch.out(command, **options))
    return items


def one_item(scratch: Scratch, run: str, kind: str, **options: Any) -> dict[str, Any]:
    """The run's one pending item, which must be of ``kind``."""
    items = pending(scratch, run, **options)
    if [i["kind"] for i in items] != [kind]:
        raise ScenarioError(f"run {run[:8]} waits on {[i['kind'] for i in items]}, not a {kind}")
    return items[0]
