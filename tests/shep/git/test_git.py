"""shep.git against real repositories made in tmp_path (git 2.38+ on PATH)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import shep.git.merge as sgit_merge
from events.errors import GitError
from shep.git import (
    DiffStat,
    Worktree,
    add_worktree,
    branch_exists,
    commit_all,
    commit_exists,
    current_branch,
    delete_branch,
    diff_stat,
    dirty_files,
    free_branch_name,
    has_remote,
    remove_worktree,
    repo_root,
    resolve_commit,
    restore,
    slugify,
    snapshot,
    worktrees,
)
from shep.git.command import run_git
from shep.git.merge import (
    PullRequest,
    Squash,
    advance_base,
    open_pull_request,
    prepare_squash,
    push,
)

# The identity the test's own setup commits carry; shep's functions never see it.
SETUP_IDENTITY = {
    "GIT_AUTHOR_NAME": "Setup",
    "GIT_AUTHOR_EMAIL": "setup@example.com",
    "GIT_COMMITTER_NAME": "Setup",
    "GIT_COMMITTER_EMAIL": "setup@example.com",
}


@pytest.fixture(autouse=True)
def isolated_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No user or system git config leaks in, and no repository above tmp_path is found."""
    empty = tmp_path / "empty-gitconfig"
    empty.write_text("")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(empty))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    for var in (*SETUP_IDENTITY, "GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        monkeypatch.delenv(var, raising=False)


def git(cwd: Path, *args: str) -> str:
    """Run git for the test's own setup and checks; its stdout."""
    done = subprocess.run(
        ["git", "-C", str(cwd), *args],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **SETUP_IDENTITY, "LC_ALL": "C"},
    )
    assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr}"
    return done.stdout


def files_of(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` outside .git, by relative path."""
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(root).parts
    }


def tree_files(repo: Path, commit: str) -> dict[str, bytes]:
    """The files of ``commit``'s tree, by path."""
    names = git(repo, "ls-tree", "-r", "-z", "--name-only", commit).split("\0")
    return {
        name: subprocess.run(
            ["git", "-C", str(repo), "show", f"{commit}:{name}"], capture_output=True, check=True
        ).stdout
        for name in names
        if name
    }


def make_repo(path: Path, *, identity: bool = True) -> Path:
    """A repository on ``main`` with a few committed files and a .gitignore."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    if identity:
        git(path, "config", "user.name", "Repo User")
        git(path, "config", "user.email", "user@example.com")
    (path / "a.txt").write_text("one\ntwo\nthree\n")
    (path / "src").mkdir()
    (path / "src" / "app.py").write_text("print('hi')\n")
    (path / "gone.txt").write_text("bye\nbye\n")
    (path / ".gitignore").write_text("*.log\n")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "initial")
    return path


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


def state(repo: Path) -> tuple[str, str, str, str, dict[str, bytes]]:
    """What the user sees of a checkout: HEAD, branch, staged diff, status, file bytes."""
    return (
        git(repo, "rev-parse", "HEAD"),
        git(repo, "symbolic-ref", "-q", "HEAD"),
        git(repo, "diff", "--cached"),
        git(repo, "status", "--porcelain", "--untracked-files=all"),
        files_of(repo),
    )


def feature_branch(repo: Path, name: str, files: dict[str, str], *, commits: int = 1) -> str:
    """A branch ``name`` off main with ``files`` written over ``commits`` commits; its tip."""
    git(repo, "branch", name, "main")
    tree = repo.parent / f"wt-{name}"
    git(repo, "worktree", "add", "-q", str(tree), name)
    items = list(files.items())
    for i in range(commits):
        for path, text in items[i::commits]:
            (tree / path).parent.mkdir(parents=True, exist_ok=True)
            (tree / path).write_text(text)
        git(tree, "add", "-A")
        git(tree, "commit", "-q", "-m", f"{name} {i}")
    git(repo, "worktree", "remove", str(tree))
    return git(repo, "rev-parse", name).strip()


# --- queries -----------------------------------------------------------------------


def test_repo_root_finds_the_top_from_a_subdirectory(repo: Path) -> None:
    """repo_root returns the work tree root whichever directory inside it is given."""
    assert repo_root(repo / "src") == repo.resolve()


def test_repo_root_not_a_repository(tmp_path: Path) -> None:
    """A plain directory: one line saying it is not a git repository."""
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(GitError, match=r"plain is not a git repository") as e:
        repo_root(plain)
    assert "\n" not in str(e.value)


def test_repo_root_outside_git_is_the_directory_itself(repo: Path, tmp_path: Path) -> None:
    """outside_git (`shep run`): a directory no repository holds is its own root, and a
    subdirectory of a repository still means the repository's root."""
    plain = tmp_path / "plain" / "sub"
    plain.mkdir(parents=True)
    assert repo_root(plain, outside_git=True) == plain.resolve()
    assert repo_root(repo / "src", outside_git=True) == repo.resolve()


def test_repo_root_bare_repository(tmp_path: Path) -> None:
    """A bare repository has its own message, distinct from 'not a repository'."""
    git(tmp_path, "init", "-q", "--bare", "b.git")
    with pytest.raises(GitError, match=r"b\.git is a bare repository") as e:
        repo_root(tmp_path / "b.git")
    assert "not a git repository" not in str(e.value)


def test_repo_root_inside_the_git_directory(repo: Path) -> None:
    """The .git directory itself is no work tree."""
    with pytest.raises(GitError, match=r"inside a \.git directory"):
        repo_root(repo / ".git")


def test_repo_root_missing_path(tmp_path: Path) -> None:
    """A path that does not exist is refused before git runs."""
    with pytest.raises(GitError, match="is not a directory"):
        repo_root(tmp_path / "nope")


def test_current_branch_and_detached_head(repo: Path) -> None:
    """The branch's short name; None once HEAD is detached."""
    assert current_branch(repo) == "main"
    git(repo, "checkout", "-q", "--detach")
    assert current_branch(repo) is None


def test_resolve_commit(repo: Path) -> None:
    """A ref resolves to the full sha; an unknown one is a GitError."""
    assert resolve_commit(repo, "main") == git(repo, "rev-parse", "HEAD").strip()
    assert len(resolve_commit(repo, "HEAD")) == 40
    with pytest.raises(GitError, match="'nope' is not a commit"):
        resolve_commit(repo, "nope")
    with pytest.raises(GitError):
        resolve_commit(repo, "--all")  # never taken as an option


def test_commit_exists(repo: Path) -> None:
    """Known commits exist; a made-up sha does not."""
    assert commit_exists(repo, git(repo, "rev-parse", "HEAD").strip())
    assert not commit_exists(repo, "0" * 40)
    assert not commit_exists(repo, "1234567890abcdef1234567890abcdef12345678")


def test_dirty_files(repo: Path) -> None:
    """Clean is empty; modified, staged and untracked (not ignored) files each appear."""
    assert dirty_files(repo) == []
    (repo / "a.txt").write_text("changed\n")
    (repo / "src" / "new").mkdir()
    (repo / "src" / "new" / "untracked.py").write_text("x\n")
    (repo / "debug.log").write_text("ignored\n")
    (repo / "staged.txt").write_text("s\n")
    git(repo, "add", "staged.txt")
    assert sorted(dirty_files(repo)) == ["a.txt", "src/new/untracked.py", "staged.txt"]


def test_dirty_files_leaves_out_the_untracked_paths_it_is_told_to(repo: Path) -> None:
    """untracked_ok (shep's own report) leaves out those paths while untracked: the same
    name elsewhere, or once tracked and changed, still counts."""
    (repo / "report.md").write_text("r\n")
    (repo / "src" / "report.md").write_text("r\n")
    assert dirty_files(repo, untracked_ok=["report.md"]) == ["src/report.md"]
    git(repo, "add", "report.md")
    assert sorted(dirty_files(repo, untracked_ok=["report.md"])) == [
        "report.md",
        "src/report.md",
    ]


def test_dirty_files_sees_untracked_even_when_status_hides_them(repo: Path) -> None:
    """status.showUntrackedFiles=no in the user's config does not hide untracked files."""
    git(repo, "config", "status.showUntrackedFiles", "no")
    (repo / "new.txt").write_text("x\n")
    assert dirty_files(repo) == ["new.txt"]


def test_dirty_files_reports_a_staged_rename_once(repo: Path) -> None:
    """A staged rename is its new path, not two entries or the old path's leftovers."""
    git(repo, "mv", "a.txt", "b.txt")
    assert dirty_files(repo) == ["b.txt"]


def test_has_remote(repo: Path, tmp_path: Path) -> None:
    """None without remotes; the only one; origin when there is one."""
    assert has_remote(repo) is None
    git(repo, "remote", "add", "backup", str(tmp_path / "x"))
    assert has_remote(repo) == "backup"
    git(repo, "remote", "add", "origin", str(tmp_path / "y"))
    assert has_remote(repo) == "origin"


# --- names -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Add OAuth login!", "add-oauth-login"),
        ("  Crème brûlée   recipes ", "creme-brulee-recipes"),
        ("日本語", "feature"),
        ("", "feature"),
        ("fix bug #123 in v2.0", "fix-bug-123-in-v2-0"),
        ("a" * 50, "a" * 40),
        (
            "alpha beta gamma delta epsilon zeta eta theta",
            "alpha-beta-gamma-delta-epsilon-zeta-eta",
        ),
    ],
)
def test_slugify(text: str, expected: str) -> None:
    """Lowercase ascii words joined by '-', cut at a word boundary within max_len."""
    assert slugify(text) == expected
    assert len(slugify(text)) <= 40


def test_slugify_max_len() -> None:
    """A shorter max_len cuts at the last word that fits."""
    assert slugify("one two three", max_len=8) == "one-two"


def test_free_branch_name_suffixes_on_clash(repo: Path, tmp_path: Path) -> None:
    """prefix+slug when free; -2 when the branch exists; -3 when -2's worktree dir exists."""
    trees = tmp_path / "trees"
    assert free_branch_name(repo, "feat/", "login", worktrees_dir=trees) == "feat/login"
    git(repo, "branch", "feat/login")
    assert free_branch_name(repo, "feat/", "login", worktrees_dir=trees) == "feat/login-2"
    (trees / "login-2").mkdir(parents=True)
    assert free_branch_name(repo, "feat/", "login", worktrees_dir=trees) == "feat/login-3"
    assert free_branch_name(repo, "feat/", "login") == "feat/login-2"


def test_free_branch_name_rejects_invalid_names(repo: Path) -> None:
    """A name git would not accept as a branch is a GitError."""
    with pytest.raises(GitError, match="branch name"):
        free_branch_name(repo, "bad..", "x")


# --- worktrees ---------------------------------------------------------------------


def test_add_worktree_creates_branch_and_checkout(repo: Path, tmp_path: Path) -> None:
    """The branch starts at base_sha and the worktree (parents made) has it checked out."""
    base = git(repo, "rev-parse", "HEAD").strip()
    git(repo, "commit", "-q", "--allow-empty", "-m", "later")
    path = tmp_path / "deep" / "trees" / "login"
    add_worktree(repo, path, "feat/login", base)
    assert git(repo, "rev-parse", "feat/login").strip() == base
    assert current_branch(path) == "feat/login"
    assert (path / "a.txt").read_text() == "one\ntwo\nthree\n"
    listed = worktrees(repo)
    assert listed[0] == Worktree(
        path=repo.resolve(), branch="main", head=git(repo, "rev-parse", "HEAD").strip()
    )
    assert listed[1] == Worktree(path=path.resolve(), branch="feat/login", head=base)
    assert current_branch(repo) == "main"


def test_add_worktree_is_idempotent(repo: Path, tmp_path: Path) -> None:
    """A second call for the same path and branch changes nothing."""
    base = git(repo, "rev-parse", "HEAD").strip()
    path = tmp_path / "trees" / "x"
    add_worktree(repo, path, "feat/x", base)
    (path / "work.txt").write_text("in progress\n")
    add_worktree(repo, path, "feat/x", base)
    assert (path / "work.txt").read_text() == "in progress\n"
    assert len(worktrees(repo)) == 2


def test_add_worktree_refuses_an_existing_path(repo: Path, tmp_path: Path) -> None:
    """A plain directory, or a worktree on another branch, at the path is a GitError."""
    base = git(repo, "rev-parse", "HEAD").strip()
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(GitError, match="already exists"):
        add_worktree(repo, plain, "feat/p", base)
    assert not branch_exists(repo, "feat/p")
    add_worktree(repo, tmp_path / "wt", "feat/a", base)
    with pytest.raises(GitError, match="not a worktree on feat/b"):
        add_worktree(repo, tmp_path / "wt", "feat/b", base)


def test_add_worktree_reuses_a_branch_left_by_a_crash(repo: Path, tmp_path: Path) -> None:
    """The branch exists but its worktree was deleted by hand: it is checked out again."""
    base = git(repo, "rev-parse", "HEAD").strip()
    path = tmp_path / "wt"
    add_worktree(repo, path, "feat/a", base)
    (path / "p.txt").write_text("p\n")
    commit_all(path, "progress", branch="feat/a")
    tip = git(repo, "rev-parse", "feat/a").strip()
    subprocess.run(["rm", "-rf", str(path)], check=True)
    add_worktree(repo, path, "feat/a", base)
    assert git(path, "rev-parse", "HEAD").strip() == tip
    assert (path / "p.txt").read_text() == "p\n"


def test_worktrees_reports_detached_heads(repo: Path, tmp_path: Path) -> None:
    """A detached worktree has branch None and its commit as head."""
    head = git(repo, "rev-parse", "HEAD").strip()
    git(repo, "worktree", "add", "-q", "--detach", str(tmp_path / "d"), head)
    assert worktrees(repo)[1] == Worktree(path=(tmp_path / "d").resolve(), branch=None, head=head)


def test_remove_worktree(repo: Path, tmp_path: Path) -> None:
    """Clean removal; a dirty worktree needs force; a missing directory is pruned."""
    base = git(repo, "rev-parse", "HEAD").strip()
    clean, dirty, missing = tmp_path / "clean", tmp_path / "dirty", tmp_path / "missing"
    for path, branch in ((clean, "c"), (dirty, "d"), (missing, "m")):
        add_worktree(repo, path, branch, base)
    remove_worktree(repo, clean, force=False)
    assert not clean.exists()
    (dirty / "new.txt").write_text("work\n")
    with pytest.raises(GitError, match="force") as e:
        remove_worktree(repo, dirty, force=False)
    assert "\n" not in str(e.value)
    assert (dirty / "new.txt").exists()
    remove_worktree(repo, dirty, force=True)
    assert not dirty.exists()
    subprocess.run(["rm", "-rf", str(missing)], check=True)
    remove_worktree(repo, missing, force=False)
    remove_worktree(repo, missing, force=False)  # twice: still fine
    assert [w.path for w in worktrees(repo)] == [repo.resolve()]
    assert "missing" not in git(repo, "worktree", "list", "--porcelain")


def test_remove_worktree_refuses_a_directory_that_is_no_worktree(
    repo: Path, tmp_path: Path
) -> None:
    """Not a worktree of the repository: GitError, and the directory stays."""
    other = tmp_path / "other"
    other.mkdir()
    with pytest.raises(GitError, match="is not a worktree"):
        remove_worktree(repo, other, force=True)
    assert other.exists()


def test_delete_branch(repo: Path) -> None:
    """True when the branch is gone afterwards (deleted now, or absent already); an
    unmerged branch needs force."""
    git(repo, "branch", "merged")
    assert delete_branch(repo, "merged", force=False) is True
    assert not branch_exists(repo, "merged")
    assert delete_branch(repo, "merged", force=False) is True
    feature_branch(repo, "unmerged", {"f.txt": "f\n"})
    with pytest.raises(GitError, match="force"):
        delete_branch(repo, "unmerged", force=False)
    assert branch_exists(repo, "unmerged")
    assert delete_branch(repo, "unmerged", force=True) is True
    assert not branch_exists(repo, "unmerged")


# --- snapshots ---------------------------------------------------------------------


def make_changes(tree: Path) -> None:
    """Edits as an agent's shell would make them: modify, create, delete, ignored file."""
    subprocess.run(
        "printf 'ONE\\n' > a.txt && rm gone.txt && mkdir -p new/dir && "
        "echo fresh > new/dir/file.txt && echo noise > run.log",
        shell=True,
        cwd=tree,
        check=True,
    )


def test_snapshot_captures_everything_and_touches_nothing(repo: Path) -> None:
    """Untracked and shell-made changes are in the snapshot; HEAD, index, status, branch
    and the index file itself are exactly as before.
    """
    make_changes(repo)
    (repo / "src" / "app.py").write_text("print('staged')\n")
    git(repo, "add", "src/app.py")
    index = repo / ".git" / "index"
    before, index_bytes = state(repo), index.read_bytes()
    head = before[0].strip()

    sha = snapshot(repo, "refs/shep/runs/r1/1", message="task 1")

    assert state(repo) == before
    assert index.read_bytes() == index_bytes
    assert git(repo, "rev-parse", "refs/shep/runs/r1/1").strip() == sha
    assert git(repo, "rev-parse", f"{sha}^").strip() == head
    assert git(repo, "log", "-1", "--format=%s", sha).strip() == "task 1"
    assert tree_files(repo, sha) == {
        ".gitignore": b"*.log\n",
        "a.txt": b"ONE\n",
        "new/dir/file.txt": b"fresh\n",
        "src/app.py": b"print('staged')\n",
    }


def test_snapshot_of_an_unchanged_tree_is_the_same_tree(repo: Path) -> None:
    """Two snapshots of the same files have the same tree; clean gives HEAD's tree."""
    first = snapshot(repo, "refs/shep/a", message="a")
    second = snapshot(repo, "refs/shep/b", message="b")
    tree = git(repo, "rev-parse", "HEAD^{tree}").strip()
    assert git(repo, "rev-parse", f"{first}^{{tree}}").strip() == tree
    assert git(repo, "rev-parse", f"{second}^{{tree}}").strip() == tree
    make_changes(repo)
    third = snapshot(repo, "refs/shep/c", message="c")
    fourth = snapshot(repo, "refs/shep/d", message="d")
    assert git(repo, "rev-parse", f"{third}^{{tree}}") == git(
        repo, "rev-parse", f"{fourth}^{{tree}}"
    )
    assert git(repo, "rev-parse", f"{third}^{{tree}}").strip() != tree


def test_snapshot_in_a_linked_worktree(repo: Path, tmp_path: Path) -> None:
    """In shep's worktree the snapshot's parent is the worktree's HEAD, not the repo's."""
    base = git(repo, "rev-parse", "HEAD").strip()
    tree = tmp_path / "wt"
    add_worktree(repo, tree, "feat/s", base)
    (tree / "x.txt").write_text("x\n")
    commit_all(tree, "first", branch="feat/s")
    (tree / "y.txt").write_text("y\n")
    before = state(tree)
    sha = snapshot(tree, "refs/shep/runs/r/1", message="s")
    assert state(tree) == before
    assert git(repo, "rev-parse", f"{sha}^").strip() == git(tree, "rev-parse", "HEAD").strip()
    assert {"x.txt", "y.txt"} <= tree_files(repo, sha).keys()
    assert git(repo, "rev-parse", "refs/shep/runs/r/1").strip() == sha


def test_snapshot_identity_falls_back_to_shep(tmp_path: Path) -> None:
    """No identity configured: the snapshot is authored by shep; configured: by the user."""
    bare_identity = make_repo(tmp_path / "noid", identity=False)
    sha = snapshot(bare_identity, "refs/shep/s", message="s")
    assert git(bare_identity, "log", "-1", "--format=%an <%ae>|%cn <%ce>", sha).strip() == (
        "shep <shep@localhost>|shep <shep@localhost>"
    )
    with_identity = make_repo(tmp_path / "id")
    sha = snapshot(with_identity, "refs/shep/s", message="s")
    assert git(with_identity, "log", "-1", "--format=%an <%ae>", sha).strip() == (
        "Repo User <user@example.com>"
    )


def test_snapshot_never_uses_a_guessed_identity(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An identity git would guess ($EMAIL, the login name) is not configured: shep's."""
    monkeypatch.setenv("EMAIL", "guess@example.com")
    path = make_repo(tmp_path / "guess", identity=False)
    sha = snapshot(path, "refs/shep/s", message="s")
    assert git(path, "log", "-1", "--format=%an <%ae>", sha).strip() == "shep <shep@localhost>"


def test_commit_identity_fills_only_what_is_missing(tmp_path: Path) -> None:
    """A configured name without an email: the user's name with shep's email."""
    path = make_repo(tmp_path / "half", identity=False)
    git(path, "config", "user.name", "Half User")
    sha = snapshot(path, "refs/shep/s", message="s")
    assert git(path, "log", "-1", "--format=%an <%ae>|%cn <%ce>", sha).strip() == (
        "Half User <shep@localhost>|Half User <shep@localhost>"
    )


def test_snapshot_on_an_unborn_branch(tmp_path: Path) -> None:
    """A repository without commits: a root commit holding the files."""
    path = tmp_path / "empty"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    (path / "f.txt").write_text("f\n")
    sha = snapshot(path, "refs/shep/s", message="s")
    assert git(path, "rev-list", "--parents", "-1", sha).split() == [sha]
    assert tree_files(path, sha) == {"f.txt": b"f\n"}
    assert git(path, "status", "--porcelain") == "?? f.txt\n"


def test_restore_brings_back_the_snapshot_files(repo: Path) -> None:
    """After more edits, new files and deletions, restore gives back the snapshot's files
    exactly; ignored files stay; HEAD and the index are untouched.
    """
    make_changes(repo)
    sha = snapshot(repo, "refs/shep/s", message="s")
    expected = {k: v for k, v in files_of(repo).items() if k != "run.log"}
    (repo / "a.txt").write_text("later edit\n")
    (repo / "new" / "dir" / "file.txt").unlink()
    (repo / "gone.txt").write_text("back again\n")
    (repo / "extra").mkdir()
    (repo / "extra" / "junk.py").write_text("junk\n")
    (repo / "other.log").write_text("ignored\n")
    git(repo, "add", "gone.txt")
    head, index_diff = git(repo, "rev-parse", "HEAD"), git(repo, "diff", "--cached")

    restore(repo, sha)

    assert {k: v for k, v in files_of(repo).items() if not k.endswith(".log")} == expected
    assert (repo / "other.log").read_text() == "ignored\n"
    assert (repo / "run.log").exists()
    assert not (repo / "extra").exists()
    assert git(repo, "rev-parse", "HEAD") == head
    assert git(repo, "diff", "--cached") == index_diff
    assert current_branch(repo) == "main"


def test_restore_to_head_discards_everything(repo: Path) -> None:
    """Restoring HEAD's commit removes untracked files and undoes edits."""
    clean = files_of(repo)
    make_changes(repo)
    restore(repo, "HEAD")
    assert {k: v for k, v in files_of(repo).items() if k != "run.log"} == clean
    assert git(repo, "status", "--porcelain") == ""


def test_restore_overwrites_an_ignored_file_the_commit_tracks(repo: Path) -> None:
    """A file the snapshot holds but that is now untracked and ignored is restored too."""
    (repo / "keep.log").write_text("tracked log\n")
    git(repo, "add", "-f", "keep.log")
    sha = snapshot(repo, "refs/shep/s", message="s")
    git(repo, "rm", "-q", "--cached", "keep.log")
    (repo / "keep.log").write_text("changed\n")
    restore(repo, sha)
    assert (repo / "keep.log").read_text() == "tracked log\n"


def test_restore_an_unknown_commit(repo: Path) -> None:
    """An unknown commit is a GitError before any file is touched."""
    make_changes(repo)
    before = files_of(repo)
    with pytest.raises(GitError, match="is not a commit"):
        restore(repo, "0" * 40)
    assert files_of(repo) == before


# --- commits and diffs -------------------------------------------------------------


def test_commit_all(repo: Path) -> None:
    """Nothing changed: None. Otherwise every file (untracked too) in one new commit."""
    assert commit_all(repo, "nothing", branch="main") is None
    old = git(repo, "rev-parse", "HEAD").strip()
    make_changes(repo)
    sha = commit_all(repo, "work", branch="main")
    assert sha == git(repo, "rev-parse", "HEAD").strip()
    assert git(repo, "rev-parse", "HEAD^").strip() == old
    assert git(repo, "status", "--porcelain") == ""
    assert "new/dir/file.txt" in tree_files(repo, sha)
    assert "run.log" not in tree_files(repo, sha)
    assert commit_all(repo, "again", branch="main") is None


def test_commit_all_without_identity_uses_shep(tmp_path: Path) -> None:
    """No user identity configured: the commit is shep's rather than failing."""
    path = make_repo(tmp_path / "r", identity=False)
    (path / "n.txt").write_text("n\n")
    sha = commit_all(path, "work", branch="main")
    assert sha is not None
    assert git(path, "log", "-1", "--format=%an <%ae>").strip() == "shep <shep@localhost>"


def test_diff_stat_counts_exactly(repo: Path) -> None:
    """Files, lines and commits of base...head; a binary counts as a file of 0 lines."""
    base = git(repo, "rev-parse", "HEAD").strip()
    git(repo, "checkout", "-q", "-b", "feat")
    (repo / "a.txt").write_text("one\nTWO\nthree\nfour\n")  # +2 -1
    (repo / "gone.txt").unlink()  # -2
    git(repo, "commit", "-q", "-am", "edit")
    (repo / "new.txt").write_text("1\n2\n3\n")  # +3
    (repo / "blob.bin").write_bytes(bytes(range(256)) * 4)  # binary: 0 lines
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "add")
    git(repo, "mv", "src/app.py", "src/main.py")  # a rename: one file, 0 lines
    git(repo, "commit", "-q", "-m", "rename")
    assert diff_stat(repo, base, "feat") == DiffStat(files=5, added=5, removed=3, commits=3)
    assert diff_stat(repo, "main", "feat") == DiffStat(files=5, added=5, removed=3, commits=3)
    assert diff_stat(repo, "feat", "feat") == DiffStat(files=0, added=0, removed=0, commits=0)


def test_diff_stat_ignores_base_commits_after_the_fork(repo: Path) -> None:
    """Commits on the base after the branch left it are not the branch's changes."""
    tip = feature_branch(repo, "feat", {"f.txt": "f\n"})
    (repo / "a.txt").write_text("main moved\n")
    git(repo, "commit", "-q", "-am", "main moves")
    assert diff_stat(repo, "main", tip) == DiffStat(files=1, added=1, removed=0, commits=1)


# --- squash merge ------------------------------------------------------------------


def squash_merge(repo: Path, base: str, branch: str, message: str) -> Squash:
    """The merge step's two steps, without its record in between: the squash computed and
    committed, then the base moved to it when there is a commit."""
    squash = prepare_squash(repo, base, branch, message)
    if squash.commit is not None:
        advance_base(repo, squash)
    return squash


def outcome(squash: Squash) -> tuple[str | None, list[str], bool]:
    return squash.commit, squash.conflicts, squash.nothing


def test_squash_merge_into_the_checked_out_base(repo: Path) -> None:
    """One new commit on main (parent: main's old tip) holding the feature's files; the
    checkout follows it and is clean.
    """
    old = git(repo, "rev-parse", "main").strip()
    feature_branch(repo, "feat", {"f1.txt": "f1\n", "src/f2.py": "f2\n"}, commits=2)
    result = squash_merge(repo, "main", "feat", "Add the feature")
    assert result.commit is not None
    assert outcome(result) == (result.commit, [], False)
    assert result.tree == git(repo, "rev-parse", f"{result.commit}^{{tree}}").strip()
    assert git(repo, "rev-parse", "main").strip() == result.commit
    assert git(repo, "rev-list", "--parents", "-1", result.commit).split() == [result.commit, old]
    assert git(repo, "log", "-1", "--format=%s|%an", result.commit).strip() == (
        "Add the feature|Repo User"
    )
    files = tree_files(repo, result.commit)
    assert files["f1.txt"] == b"f1\n"
    assert files["src/f2.py"] == b"f2\n"
    assert files["a.txt"] == b"one\ntwo\nthree\n"
    assert (repo / "f1.txt").read_text() == "f1\n"
    assert git(repo, "status", "--porcelain") == ""
    assert current_branch(repo) == "main"


def test_squash_merge_refuses_a_dirty_base(repo: Path) -> None:
    """Uncommitted changes in the base's checkout: GitError naming them; nothing changes."""
    feature_branch(repo, "feat", {"f1.txt": "f1\n"})
    (repo / "a.txt").write_text("local edit\n")
    (repo / "scratch.txt").write_text("mine\n")
    before = state(repo)
    with pytest.raises(GitError, match=r"uncommitted changes .*a\.txt.*scratch\.txt") as e:
        squash_merge(repo, "main", "feat", "msg")
    assert "\n" not in str(e.value)
    assert state(repo) == before


def test_squash_merge_conflict_leaves_the_checkout_exactly_as_it_was(repo: Path) -> None:
    """Both sides change the same line: the conflicted files are listed, and HEAD, the
    status and every file's bytes are as before.
    """
    feature_branch(repo, "feat", {"a.txt": "one\nFEATURE\nthree\n", "ok.txt": "fine\n"})
    (repo / "a.txt").write_text("one\nMAIN\nthree\n")
    git(repo, "commit", "-q", "-am", "main edit")
    before = state(repo)
    index = (repo / ".git" / "index").read_bytes()
    result = squash_merge(repo, "main", "feat", "msg")
    assert outcome(result) == (None, ["a.txt"], False)
    assert state(repo) == before
    assert (repo / ".git" / "index").read_bytes() == index
    assert not (repo / ".git" / "MERGE_HEAD").exists()
    assert not (repo / ".git" / "SQUASH_MSG").exists()


def test_squash_merge_into_a_base_checked_out_nowhere(repo: Path) -> None:
    """The user is on another branch: main advances by one commit (merge-tree path), the
    user's HEAD, branch and files stay put.
    """
    old = git(repo, "rev-parse", "main").strip()
    feature_branch(repo, "feat", {"f1.txt": "f1\n"})
    git(repo, "checkout", "-q", "-b", "dev")
    (repo / "dev.txt").write_text("dev work\n")
    before = state(repo)
    result = squash_merge(repo, "main", "feat", "Squash feat")
    assert result.commit is not None
    assert state(repo) == before
    assert git(repo, "rev-parse", "main").strip() == result.commit
    assert git(repo, "rev-list", "--parents", "-1", result.commit).split() == [result.commit, old]
    assert tree_files(repo, result.commit)["f1.txt"] == b"f1\n"
    assert "dev.txt" not in tree_files(repo, result.commit)


def test_squash_merge_conflict_off_checkout_changes_nothing(repo: Path) -> None:
    """A conflict on the merge-tree path lists the files and leaves main where it was."""
    feature_branch(repo, "feat", {"a.txt": "one\nFEATURE\nthree\n"})
    (repo / "a.txt").write_text("one\nMAIN\nthree\n")
    git(repo, "commit", "-q", "-am", "main edit")
    git(repo, "checkout", "-q", "-b", "dev")
    old = git(repo, "rev-parse", "main")
    assert outcome(squash_merge(repo, "main", "feat", "m")) == (None, ["a.txt"], False)
    assert git(repo, "rev-parse", "main") == old


def test_squash_merge_compare_and_set(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """main moving while the merge is computed: GitError, and the newer main is kept."""
    feature_branch(repo, "feat", {"f1.txt": "f1\n"})
    git(repo, "checkout", "-q", "-b", "dev")
    real: Callable[[Any, str, str], tuple[str, list[str]]] = sgit_merge._merge_tree
    moved: list[str] = []

    def racing(where: Any, base_sha: str, tip: str) -> tuple[str, list[str]]:
        result = real(where, base_sha, tip)
        tree = git(repo, "rev-parse", "main^{tree}").strip()
        commit = git(repo, "commit-tree", tree, "-p", "main", "-m", "someone else").strip()
        git(repo, "update-ref", "refs/heads/main", commit)
        moved.append(commit)
        return result

    monkeypatch.setattr(sgit_merge, "_merge_tree", racing)
    with pytest.raises(GitError, match="main moved while merging; retry"):
        squash_merge(repo, "main", "feat", "m")
    assert git(repo, "rev-parse", "main").strip() == moved[0]


def test_squash_merge_of_a_branch_without_changes(repo: Path) -> None:
    """A branch that changes nothing on its base: nothing=True, no commit, main unmoved."""
    git(repo, "branch", "empty")
    git(repo, "checkout", "-q", "-b", "dev")
    old = git(repo, "rev-parse", "main")
    assert outcome(squash_merge(repo, "main", "empty", "m")) == (None, [], True)
    assert git(repo, "rev-parse", "main") == old
    git(repo, "checkout", "-q", "main")
    assert outcome(squash_merge(repo, "main", "empty", "m")) == (None, [], True)


def test_squash_merge_refuses_a_base_checked_out_elsewhere(repo: Path, tmp_path: Path) -> None:
    """main checked out in another worktree than the repository given: GitError."""
    feature_branch(repo, "feat", {"f1.txt": "f1\n"})
    git(repo, "checkout", "-q", "-b", "dev")
    git(repo, "worktree", "add", "-q", str(tmp_path / "elsewhere"), "main")
    old = git(repo, "rev-parse", "main")
    with pytest.raises(GitError, match=r"main is checked out in .*elsewhere"):
        squash_merge(repo, "main", "feat", "m")
    assert git(repo, "rev-parse", "main") == old


def test_squash_merge_without_identity_uses_shep(tmp_path: Path) -> None:
    """The user has no identity configured: the squash commit is shep's."""
    path = make_repo(tmp_path / "r", identity=False)
    feature_branch(path, "feat", {"f1.txt": "f1\n"})
    result = squash_merge(path, "main", "feat", "m")
    assert result.commit is not None
    assert git(path, "log", "-1", "--format=%an <%ae>").strip() == "shep <shep@localhost>"


# --- remotes -----------------------------------------------------------------------


def test_push(repo: Path, tmp_path: Path) -> None:
    """The branch arrives on the remote under its own name."""
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(repo, "remote", "add", "origin", str(remote))
    tip = feature_branch(repo, "feat/x", {"x.txt": "x\n"})
    push(repo, "feat/x", "origin")
    assert git(remote, "rev-parse", "refs/heads/feat/x").strip() == tip
    with pytest.raises(GitError, match="Cannot push feat/x to nowhere"):
        push(repo, "feat/x", "nowhere")


FAKE_GH = """\
import json, os, sys
with open(os.environ["FAKE_GH_LOG"], "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
mode = os.environ.get("FAKE_GH_MODE", "ok")
if mode == "auth":
    sys.stderr.write("To get started with GitHub CLI, please run:  gh auth login\\n")
    sys.exit(4)
if sys.argv[1:3] == ["pr", "create"]:
    if mode == "exists":
        sys.stderr.write('a pull request for branch "feat" into branch "main" already exists:\\n'
                         "https://github.com/o/r/pull/7\\n")
        sys.exit(1)
    print("https://github.com/o/r/pull/7")
elif sys.argv[1:3] == ["pr", "view"]:
    print(json.dumps({"url": "https://github.com/o/r/pull/7", "number": 7}))
else:
    sys.exit(2)
"""


@pytest.fixture
def fake_gh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A ``gh`` on PATH that logs its arguments; FAKE_GH_MODE picks its behaviour."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    gh = bin_dir / "gh"
    gh.write_text(f"#!{sys.executable}\n{FAKE_GH}")
    gh.chmod(0o755)
    log = tmp_path / "gh.log"
    monkeypatch.setenv("FAKE_GH_LOG", str(log))
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return log


def logged(log: Path) -> list[list[str]]:
    import json

    return [json.loads(line) for line in log.read_text().splitlines()]


def test_open_pull_request(repo: Path, fake_gh: Path) -> None:
    """gh pr create with the branch, base, title and body, then gh pr view confirms it."""
    pr = open_pull_request(repo, "feat", "main", "Add login", "Body\ntext")
    assert pr == PullRequest(url="https://github.com/o/r/pull/7", number=7)
    assert logged(fake_gh) == [
        ["pr", "create", "--head", "feat", "--base", "main", "--title", "Add login", "--body",
         "Body\ntext"],
        ["pr", "view", "feat", "--json", "url,number"],
    ]  # fmt: skip


def test_open_pull_request_that_already_exists(
    repo: Path, fake_gh: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A retried step finds the existing pull request instead of failing."""
    monkeypatch.setenv("FAKE_GH_MODE", "exists")
    assert open_pull_request(repo, "feat", "main", "t", "b").number == 7


def test_open_pull_request_not_logged_in(
    repo: Path, fake_gh: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gh says authentication is needed: one line saying to run gh auth login."""
    monkeypatch.setenv("FAKE_GH_MODE", "auth")
    with pytest.raises(GitError, match="gh is not logged in; run `gh auth login`") as e:
        open_pull_request(repo, "feat", "main", "t", "b")
    assert "\n" not in str(e.value)


def test_open_pull_request_without_gh(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No gh on PATH: GitError telling the user to install GitHub's gh CLI."""
    empty = tmp_path / "nobin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    with pytest.raises(GitError, match="install GitHub's gh CLI"):
        open_pull_request(repo, "feat", "main", "t", "b")


def test_git_errors_are_one_line_with_gits_reason(repo: Path) -> None:
    """A failing git command's error quotes git's reason on one line."""
    with pytest.raises(GitError) as e:
        add_worktree(repo, repo.parent / "wt", "bad..name", "HEAD")
    message = str(e.value)
    assert message.startswith("Cannot create worktree")
    assert "not a valid branch name" in message
    assert "\n" not in message


def test_a_git_that_hangs_times_out(repo: Path) -> None:
    """A git command past its timeout is a GitError naming the command, not a hang."""
    git(repo, "config", "alias.x", "!sleep 5")
    with pytest.raises(GitError, match=r"Cannot wait: git x did not finish within 0\.5s"):
        run_git(repo, "x", doing="wait", timeout=0.5)


def test_repository_variables_from_a_hook_do_not_leak(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GIT_DIR / GIT_INDEX_FILE from the environment (shep run from a hook) are ignored."""
    other = make_repo(tmp_path / "other")
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    monkeypatch.setenv("GIT_INDEX_FILE", str(other / ".git" / "index"))
    assert repo_root(repo / "src") == repo.resolve()
    (repo / "mine.txt").write_text("m\n")
    assert dirty_files(repo) == ["mine.txt"]
