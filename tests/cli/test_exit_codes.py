"""Exit codes as docs/architecture.md gives them: 2 for bad input (a name that names
nothing, a path that is no repository, a missing option value), 1 for failures.

Each case is a real `shep` subprocess: one line on stderr, the code, nothing on stdout.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.shep.workflows.conftest import make_repo
from tests.support.cli import shep

NOTICE = re.compile(r"^\d+ waiting in the inbox: shep inbox$")


def _one_line(code: int, words: str, *args: str) -> None:
    result = shep(*args)
    lines = [x for x in result.stderr.splitlines() if not NOTICE.match(x)]
    assert (result.returncode, result.stdout) == (code, ""), (args, result.stderr)
    assert len(lines) == 1, (args, result.stderr)
    assert lines[0].startswith("shep: "), lines
    assert words in lines[0], (args, lines[0])


def test_feat_show_and_rm_of_no_feature_are_bad_input(shep_home: Path) -> None:
    """`feat show nope` and `feat rm nope` name no feature: exit 2, as `status nope` does,
    before any store exists and after; so does a run that is not a feature.
    """
    _one_line(2, "No feature 'nope'", "feat", "show", "nope")
    _one_line(2, "No feature 'nope'", "feat", "rm", "nope")
    configured = shep("settings", "agent", "--agent", "demo")
    assert configured.returncode == 0, configured.stderr
    _one_line(2, "No feature 'nope'", "feat", "show", "nope")
    _one_line(2, "No feature 'nope'", "feat", "rm", "nope")
    _one_line(2, "No run 'nope'", "status", "nope")


@pytest.fixture
def demo_agent(shep_home: Path) -> None:
    configured = shep("settings", "agent", "--agent", "demo")
    assert configured.returncode == 0, configured.stderr


@pytest.mark.usefixtures("demo_agent")
def test_feat_new_where_no_feature_can_start_is_bad_input(tmp_path: Path) -> None:
    """`feat new` outside a repository (a plain directory, a missing one, a bare repository,
    inside .git), with an empty description or an unknown --base: exit 2, nothing made.
    """
    plain = tmp_path / "plain"
    plain.mkdir()
    bare = tmp_path / "bare.git"
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
    repo = make_repo(tmp_path / "repo")
    _one_line(2, "is not a git repository", "feat", "new", "X", "--repo", str(plain))
    _one_line(2, "is not a directory", "feat", "new", "X", "--repo", str(tmp_path / "none"))
    _one_line(2, "is a bare repository", "feat", "new", "X", "--repo", str(bare))
    _one_line(2, "inside a .git directory", "feat", "new", "X", "--repo", str(repo / ".git"))
    _one_line(2, "needs a description", "feat", "new", "  ", "--repo", str(repo))
    _one_line(2, "has no branch 'nope'", "feat", "new", "X", "--repo", str(repo), "--base", "nope")
    detached = make_repo(tmp_path / "detached")
    subprocess.run(["git", "-C", str(detached), "checkout", "-q", "--detach"], check=True)
    _one_line(2, "detached HEAD", "feat", "new", "X", "--repo", str(detached))
    assert not (Path(repo) / ".git" / "refs" / "heads" / "shep").exists()


def test_verifying_a_file_that_is_not_there_is_bad_input(tmp_path: Path) -> None:
    """`audit verify --bundle` or `--export` of a path that names no file: exit 2 (it is
    not a broken chain, 4, nor a failure, 1).
    """
    missing = tmp_path / "nope.tar"
    _one_line(2, str(missing), "audit", "verify", "--bundle", str(missing))
    _one_line(2, str(missing), "audit", "verify", "--export", str(missing))
