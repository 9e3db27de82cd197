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
import sys
from pathlib import Path

import pytest

from events.features import FeatureMerged, TestsRan
from events.inbox import ApprovalRequested
from events.runs import RunCompleted
from tests.e2e.cli import shep
from tests.feature.conftest import FeatureAgent, git
from tests.feature.test_feature_workflow import feat_new, inbox, only_run, run_events, tree_files
from tests.gates.event_log import of_type, read_events, wait_for_status

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
