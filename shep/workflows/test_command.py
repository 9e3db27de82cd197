"""The tests step's findings: which command runs a repository's tests (its own
configuration, never a file outside the worktree), which Python it runs with, and
the line of a failed run's output that says why.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from pathlib import Path


def detect_test_command(worktree: Path, source: Path | None = None) -> str | None:
    """The project's test command, when the repository says it plainly; None otherwise.

    A Python project's tests run with the interpreter its user would pick
    (``project_python``); ``source`` is the user's repository the worktree was made from.
    """
    import shlex

    # Files the repository (or the agent) wrote: read only inside the worktree, never
    # through a link out of it.
    package = _read_project_file(worktree, "package.json")
    with contextlib.suppress(ValueError, AttributeError):
        script = (json.loads(package).get("scripts") or {}).get("test", "")
        if script and "no test specified" not in script:
            return "npm test"
    makefile = _read_project_file(worktree, "Makefile")
    if any(line.startswith("test:") for line in makefile.splitlines()):
        return "make test"
    python = any((worktree / f).is_file() for f in ("pyproject.toml", "setup.py", "pytest.ini"))
    if python and ((worktree / "tests").is_dir() or (worktree / "test").is_dir()):
        return f"{shlex.quote(project_python(worktree, source))} -m pytest -q"
    if (worktree / "Cargo.toml").is_file():
        return "cargo test"
    if (worktree / "go.mod").is_file():
        return "go test ./..."
    return None


def _read_project_file(worktree: Path, name: str) -> str:
    """The text of the worktree's file ``name``; empty when it is missing, unreadable or
    reached through a symbolic link (see ``shep.git.worktree.read_inside``)."""
    from events.errors import UnsafePathError
    from shep.git.worktree import read_inside

    try:
        return read_inside(worktree, name).decode("utf-8", "replace")
    except (OSError, UnsafePathError):
        return ""


def project_python(worktree: Path, source: Path | None = None) -> str:
    """The interpreter a user would run the project's tests with: the project's virtual
    environment (``.venv`` or ``venv``: the worktree's, made by a setup command, else the
    one in the user's repository, which git leaves out of the worktree), else ``python``
    (``python3`` where there is no ``python``) as the user's PATH finds it. Shep never
    changes that PATH, so its own environment is used only where the user's PATH gives it.
    The worktree's environment is named relative to the worktree, where the command runs.
    """
    import shutil

    for root in (worktree, source):
        if root is None:
            continue
        for name in (".venv", "venv"):
            candidate = root / name / "bin" / "python"
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate.relative_to(root) if root == worktree else candidate)
    if shutil.which("python") is None and shutil.which("python3") is not None:
        return "python3"
    return "python"


#: The lines of a failed test command's output that say why, most telling first: a
#: pytest summary line with its reason; an exception, a missing module or command, a
#: panic; a line that says error or failure.
_WHY_FAILED = (
    re.compile(r"^(?:FAILED|ERROR) \S+ - \S"),
    re.compile(
        r"\b[A-Z]\w*(?:Error|Exception)\b|No module named|panicked at|not found|"
        r"Permission denied"
    ),
    re.compile(r"^(?:FAILED|FAIL|ERROR|error|fatal|npm ERR!)\b|\berror:"),
)


def failure_reason(output: str, width: int = 160) -> str:
    """The line of a failed command's output that best says why it failed (the last such
    line, pytest's ``E`` prefix taken off), else its last line; ``""`` for no output.
    """
    lines = [line.strip().removeprefix("E ").strip() for line in output.splitlines()]
    lines = [line for line in lines if line]
    for pattern in _WHY_FAILED:
        found = [line for line in lines if pattern.search(line)]
        if found:
            lines = found
            break
    if not lines:
        return ""
    line = lines[-1]
    return line if len(line) <= width else line[: width - 3] + "..."
