"""The feature workflow's tests step, as a user's project sees it: the project's own test
command run by a real worker (foreground or background) in the worktree, with the
environment, interpreter and leftovers a user would expect, and a merge gate that says
why the tests failed.

The fake feature agent (``fake_feature_agent.py`` as `claude`) writes the feature's
files in the ``fast`` step; the project's tests are real pytest runs.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from events.features import FeatureMerged, TestsRan
from events.runs import RunCompleted
from shep.workflows.test_command import detect_test_command, failure_reason, project_python
from tests.shep.workflows.conftest import FeatureAgent, git
from tests.shep.workflows.test_feature_workflow import (
    feat_new,
    inbox,
    only_run,
    run_events,
    tree_files,
)
from tests.support.cli import shep
from tests.support.event_log import of_type, wait_for_status

#: The project: a package, and a test that imports it (as the demo's sample repository does).
PROJECT = {
    "pyproject.toml": '[project]\nname = "greeting"\nversion = "0.1.0"\n',
    "greeting/__init__.py": "def hello(name: str) -> str:\n    return f'hello {name}'\n",
    "tests/test_greeting.py": (
        "from greeting import hello\n\n\n"
        "def test_hello() -> None:\n    assert hello('you') == 'hello you'\n"
    ),
}
#: What the agent writes (``fast``): a module and its test, both importing the package.
FEATURE_FILES = {
    "greeting/loud.py": "from greeting import hello\n\n\ndef loud(n: str) -> str:\n"
    "    return hello(n).upper()\n",
    "tests/test_loud.py": "from greeting.loud import loud\n\n\n"
    "def test_loud() -> None:\n    assert loud('you') == 'HELLO YOU'\n",
}


def make_project(root: Path, extra: dict[str, str] | None = None) -> Path:
    """A git repository on ``main`` holding ``PROJECT`` (and ``extra``), one commit."""
    for path, content in {**PROJECT, **(extra or {})}.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(content)
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.name", "Test User")
    git(root, "config", "user.email", "test@example.com")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "initial")
    return root


def background_feature(repo: Path, home: Path) -> str:
    """``shep feat new --fast --allow-all --background`` on ``repo``; the run id, once done."""
    started = feat_new(repo, "--fast", "--allow-all", "--background")
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.strip()
    assert len(run_id) == 32, started.stdout
    wait_for_status(home, run_id, "completed", "failed", "interrupted", timeout=90)
    return run_id


@pytest.mark.slow
def test_a_background_features_tests_import_the_project_as_in_the_foreground(
    tmp_path: Path, agent: FeatureAgent, shep_home: Path
) -> None:
    """A background worker runs the project's tests the way the user's shell would: a
    test importing the project's package (``python -m pytest`` puts the project on
    sys.path) passes, the step records it passed, and the merge goes through.
    """
    repo = make_project(tmp_path / "repo")
    agent.script(fast_files=FEATURE_FILES)
    shep("settings", "set", "test_command", f"{sys.executable} -m pytest -q", check=True)
    run_id = background_feature(repo, shep_home)
    events = run_events(shep_home, run_id)
    [tests] = of_type(events, TestsRan)
    assert tests.passed, tests.output_tail
    assert "2 passed" in tests.output_tail
    assert of_type(events, RunCompleted)
    assert of_type(events, FeatureMerged)


def test_a_background_workers_children_get_the_users_environment(
    tmp_path: Path, agent: FeatureAgent, shep_home: Path
) -> None:
    """What a background worker starts (here the test command) gets the environment of
    the user who started the run, plus only the feature's SHEP_* variables: shep isolates
    its own interpreter (no PYTHONSAFEPATH or the like leaks into the project's tools).
    """
    repo = make_project(tmp_path / "repo")
    dump = tmp_path / "env.json"
    script = "import json, os, sys; json.dump(dict(os.environ), open(sys.argv[1], 'w'))"
    command = shlex.join([sys.executable, "-c", script, str(dump)])
    shep("settings", "set", "test_command", command, check=True)
    run_id = background_feature(repo, shep_home)
    [tests] = of_type(run_events(shep_home, run_id), TestsRan)
    assert tests.passed, tests.output_tail
    seen = json.loads(dump.read_text())
    assert "PYTHONSAFEPATH" not in seen
    added = {k: v for k, v in seen.items() if k not in os.environ}
    assert sorted(added) == [
        "SHEP_BASE",
        "SHEP_BRANCH",
        "SHEP_REPO",
        "SHEP_RUN_ID",
        "SHEP_SPEC_DIR",
        "SHEP_WORKTREE",
    ]
    assert {k: v for k, v in seen.items() if k in os.environ} == dict(os.environ)


# -- what the test command leaves behind ----------------------------------------------------

#: A test that leaves things behind as real suites do: a log (ignored by the project), a
#: build directory (not ignored), and a rewritten tracked fixture.
LITTERING_TEST = """import pathlib

from greeting import hello


def test_hello_and_litter() -> None:
    pathlib.Path("test-run.log").write_text("ran\\n")
    pathlib.Path("build").mkdir(exist_ok=True)
    pathlib.Path("build/report.txt").write_text("report\\n")
    pathlib.Path("data/fixture.json").write_text('{"rewritten": true}\\n')
    assert hello("you") == "hello you"
"""


@pytest.mark.slow
def test_what_the_tests_leave_behind_is_neither_counted_nor_merged(
    tmp_path: Path, agent: FeatureAgent, shep_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real pytest run in the worktree writes __pycache__/*.pyc, .pytest_cache, an ignored
    log, an untracked build directory and rewrites a tracked fixture: none of it is the
    agent's work. The merge gate counts the agent's two files, the squash commit holds
    exactly the project and those two files, and the fixture is merged unchanged.
    """
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    repo = make_project(
        tmp_path / "repo",
        {
            ".gitignore": "*.log\n",
            "data/fixture.json": '{"original": true}\n',
            "tests/test_greeting.py": LITTERING_TEST,
        },
    )
    before = tree_files(repo, "HEAD")
    old_tip = git(repo, "rev-parse", "HEAD")
    agent.script(fast_files=FEATURE_FILES)
    shep("settings", "set", "test_command", f"{sys.executable} -m pytest -q", check=True)
    result = feat_new(repo, "--fast")
    assert result.returncode == 0, result.stderr
    run_id = only_run(shep_home)
    [tests] = of_type(run_events(shep_home, run_id), TestsRan)
    assert tests.passed, tests.output_tail
    [gate] = inbox()
    assert "2 files changed, +10 -0 lines" in gate["prompt"], gate["prompt"]

    assert shep("approve", gate["item_id"][:8], "--wait", timeout=120).returncode == 0
    [merged] = of_type(run_events(shep_home, run_id), FeatureMerged)
    assert merged.files == 2
    tip = git(repo, "rev-parse", "main")
    assert git(repo, "rev-list", "--parents", "-n", "1", tip).split() == [tip, old_tip]
    assert tree_files(repo, tip) == sorted([*before, *FEATURE_FILES])
    assert git(repo, "show", f"{tip}:data/fixture.json") == '{"original": true}'


# -- why the tests failed, and with which interpreter -----------------------------------------


def _python_without_pytest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``python`` first on PATH is an interpreter that has no pytest (the system's)."""
    bin_dir = tmp_path / "user-bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to("/usr/bin/python3")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    found = subprocess.run(["python", "-c", "import pytest"], capture_output=True, check=False)
    if found.returncode == 0:
        pytest.skip("/usr/bin/python3 has pytest here")
    return bin_dir


def test_the_merge_gate_says_why_the_tests_failed(
    tmp_path: Path, agent: FeatureAgent, shep_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The detected `python -m pytest -q` runs the user's python, which lacks pytest: the
    gate says FAILED with the reason's line (``No module named pytest``), not the exit
    code alone.
    """
    _python_without_pytest(tmp_path, monkeypatch)
    repo = make_project(tmp_path / "repo")
    agent.script(fast_files=FEATURE_FILES)
    shep("settings", "set", "test_command", "", check=True)
    result = feat_new(repo, "--fast")
    assert result.returncode == 0, result.stderr
    [gate] = inbox()
    assert "tests: `python -m pytest -q` FAILED (exit 1): " in gate["prompt"], gate["prompt"]
    assert gate["prompt"].endswith("/python: No module named pytest"), gate["prompt"]


@pytest.mark.slow
def test_the_projects_virtual_environment_runs_its_tests(
    tmp_path: Path, agent: FeatureAgent, shep_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The repository has a .venv (ignored, so not in the worktree): the detected test
    command runs that environment's python, not the first python on PATH (which has no
    pytest), and the tests pass.
    """
    _python_without_pytest(tmp_path, monkeypatch)
    repo = make_project(tmp_path / "repo", {".gitignore": ".venv/\n"})
    venv_python = repo / ".venv" / "bin" / "python"
    venv_python.parent.mkdir(parents=True)
    venv_python.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
    venv_python.chmod(0o755)
    agent.script(fast_files=FEATURE_FILES)
    shep("settings", "set", "test_command", "", check=True)
    result = feat_new(repo, "--fast")
    assert result.returncode == 0, result.stderr
    [tests] = of_type(run_events(shep_home, only_run(shep_home)), TestsRan)
    assert tests.command == f"{shlex.quote(str(venv_python))} -m pytest -q"
    assert tests.passed, tests.output_tail
    [gate] = inbox()
    assert gate["prompt"].endswith(f"tests: `{tests.command}` passed"), gate["prompt"]


def test_the_projects_python_is_its_environments_then_the_users_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worktree's .venv (or venv) first, named relative to it; else the user's
    repository's; else `python` from PATH, or `python3` where PATH has no `python`.
    """
    worktree, source = tmp_path / "worktree", tmp_path / "source"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    assert project_python(worktree, source) == "python"
    (bin_dir / "python3").symlink_to(sys.executable)
    assert project_python(worktree, source) == "python3"
    (bin_dir / "python").symlink_to(sys.executable)
    assert project_python(worktree, source) == "python"

    def venv(root: Path, name: str) -> Path:
        python = root / name / "bin" / "python"
        python.parent.mkdir(parents=True)
        python.symlink_to(sys.executable)
        return python

    source_venv = venv(source, "venv")
    assert project_python(worktree, source) == str(source_venv)
    assert project_python(worktree, None) == "python"
    venv(worktree, "venv")
    assert project_python(worktree, source) == "venv/bin/python"
    venv(worktree, ".venv")
    assert project_python(worktree, source) == ".venv/bin/python"
    (worktree / "pyproject.toml").write_text("")
    (worktree / "tests").mkdir()
    assert detect_test_command(worktree, source) == ".venv/bin/python -m pytest -q"


def _pytest_output(tmp_path: Path, test: str) -> str:
    (tmp_path / "test_it.py").write_text(test)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_it.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode != 0
    return done.stdout + done.stderr


def test_the_reason_of_a_failure_is_the_line_that_says_why(tmp_path: Path) -> None:
    """From real pytest output: a failing assertion gives pytest's summary line with its
    reason; a test module that cannot import gives the ModuleNotFoundError line; output
    with no error line gives its last line; a long line is cut to the width.
    """
    failed = _pytest_output(tmp_path, "def test_sum():\n    assert 1 + 1 == 3\n")
    assert failure_reason(failed) == "FAILED test_it.py::test_sum - assert (1 + 1) == 3"
    missing = _pytest_output(tmp_path, "import no_such_package\n")
    assert failure_reason(missing) == "ModuleNotFoundError: No module named 'no_such_package'"
    assert failure_reason("compiling\n\n3 checks did not pass\n") == "3 checks did not pass"
    assert failure_reason("") == ""
    assert failure_reason("x" * 200, width=20) == "x" * 17 + "..."


def test_the_test_command_is_never_read_through_a_symbolic_link(tmp_path: Path) -> None:
    """A repository whose package.json and Makefile are links to files outside it: shep
    reads neither (they are not the repository's files), so no test command comes from
    them; the same files inside the repository are read."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "package.json").write_text('{"scripts": {"test": "node steal.js"}}')
    (outside / "Makefile").write_text("test:\n\tcurl evil\n")
    worktree = tmp_path / "worktree"
    worktree.mkdir()
    (worktree / "package.json").symlink_to(outside / "package.json")
    (worktree / "Makefile").symlink_to(outside / "Makefile")
    assert detect_test_command(worktree) is None
    (worktree / "Makefile").unlink()
    (worktree / "Makefile").write_text("test:\n\tpytest\n")
    assert detect_test_command(worktree) == "make test"
