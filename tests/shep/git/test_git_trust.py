"""shep's git runs nothing the repository or the agent wrote, and touches no path outside
the worktree: real repositories in tmp_path, real hooks, a real rewritten ``.git`` file,
real git processes killed with SIGKILL.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from events.errors import GitError, UnsafePathError, WorktreeLinkChangedError
from shep.git import (
    add_worktree,
    commit_all,
    delete_branch,
    dirty_files,
    remove_worktree,
    restore,
    restore_paths,
    snapshot,
)
from shep.git.command import Checkout
from shep.git.merge import advance_base, prepare_squash
from shep.git.worktree import inside_worktree, read_inside
from tests.shep.git.test_git import SETUP_IDENTITY, git, isolated_git, make_repo

__all__ = ["isolated_git"]  # the autouse fixture: no user or system git config leaks in

#: Hooks that run on commands shep uses, not only the ones `--no-verify` skips.
HOOKS = (
    "post-index-change",
    "pre-commit",
    "prepare-commit-msg",
    "commit-msg",
    "post-commit",
    "post-checkout",
    "post-merge",
    "reference-transaction",
    "pre-push",
    "post-rewrite",
)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


def husky(repo: Path, markers: Path) -> None:
    """A committed, husky-style relative ``core.hooksPath``: each hook appends its name to
    ``markers`` (so the hooks are in every worktree, where an agent could edit them)."""
    hooks = repo / ".husky"
    hooks.mkdir()
    for name in HOOKS:
        hook = hooks / name
        hook.write_text(f'#!/bin/sh\necho {name} >> "{markers}"\n')
        hook.chmod(0o755)
    git(repo, "add", ".husky")
    git(repo, "-c", "core.hooksPath=/dev/null", "commit", "-q", "-m", "hooks")
    git(repo, "config", "core.hooksPath", ".husky")


def feature_worktree(repo: Path, tmp_path: Path) -> Checkout:
    """A worktree on branch ``feat`` made as ``shep feat new`` makes it, reached through
    the git directory recorded for it."""
    base = git(repo, "rev-parse", "HEAD").strip()
    path = tmp_path / "wt"
    return Checkout(path, add_worktree(repo, path, "feat", base))


def test_no_hook_runs_in_any_git_operation_of_shep(repo: Path, tmp_path: Path) -> None:
    """With a relative core.hooksPath whose hooks the agent can write, none of them runs
    while shep makes the worktree, snapshots, restores, commits, squash-merges into the
    user's checkout, removes the worktree and deletes the branch. (The same hooks run
    for a plain `git commit`: they are live.)
    """
    markers = tmp_path / "hooks-ran"
    husky(repo, markers)
    base = git(repo, "rev-parse", "HEAD").strip()
    tree = feature_worktree(repo, tmp_path)
    (tree.path / "new.txt").write_text("agent work\n")
    snapshot(tree, "refs/shep/runs/r/1", message="task t1")
    restore(tree, base)
    (tree.path / "new.txt").write_text("agent work, again\n")
    commit_all(tree, "the feature", branch="feat")
    squash = prepare_squash(repo, "main", "feat", "Squash feat")
    assert squash.commit is not None
    advance_base(repo, squash)
    remove_worktree(repo, tree, force=False)
    assert delete_branch(repo, "feat", force=True)
    assert git(repo, "rev-parse", "main").strip() == squash.commit
    assert not markers.exists(), markers.read_text()

    git(repo, "commit", "-q", "--allow-empty", "-m", "the user's own commit")
    assert "post-commit" in markers.read_text().split()


def test_merge_hooks_run_the_repositorys_hooks_at_the_merge_only(
    repo: Path, tmp_path: Path
) -> None:
    """``hooks`` (the merge_hooks setting) runs the repository's hooks when the base moves
    in the user's checkout, and nowhere before it.
    """
    markers = tmp_path / "hooks-ran"
    husky(repo, markers)
    tree = feature_worktree(repo, tmp_path)
    (tree.path / "f.txt").write_text("f\n")
    commit_all(tree, "the feature", branch="feat")
    squash = prepare_squash(repo, "main", "feat", "Squash feat")
    assert not markers.exists()
    advance_base(repo, squash, hooks=True)
    assert "post-merge" in markers.read_text().split()


def _every_operation_refuses(repo: Path, tree: Checkout) -> list[str]:
    """Snapshot, commit, restore and status in ``tree``: each must refuse with a
    WorktreeLinkChangedError of one line; what each said."""
    base = git(repo, "rev-parse", "HEAD").strip()
    operations: list[Callable[[], Any]] = [
        lambda: snapshot(tree, "refs/shep/runs/r/1", message="s"),
        lambda: commit_all(tree, "m", branch="feat"),
        lambda: restore(tree, base),
        lambda: dirty_files(tree),
    ]
    said = []
    for operation in operations:
        with pytest.raises(WorktreeLinkChangedError) as e:
            operation()
        assert "\n" not in str(e.value)
        said.append(str(e.value))
    return said


@pytest.mark.parametrize("tamper", ["gitdir of its own", "symlink", "directory", "deleted"])
def test_a_rewritten_git_file_stops_every_git_command_and_runs_nothing(
    repo: Path, tmp_path: Path, tamper: str
) -> None:
    """The agent points the worktree's ``.git`` at a git directory it made, whose config
    names a core.fsmonitor command (or makes ``.git`` a link, a repository of its own, or
    deletes it): every git operation shep makes there refuses in one line, the command
    never runs, and nothing lands in the agent's git directory. (The same worktree,
    reached by its path the way git does by default, runs the command.)
    """
    tree = feature_worktree(repo, tmp_path)
    ran = tmp_path / "fsmonitor-ran"
    monitor = tmp_path / "fsmonitor"
    monitor.write_text(f'#!/bin/sh\necho ran >> "{ran}"\n')
    monitor.chmod(0o755)
    evil = tmp_path / "evil"
    git(tmp_path, "init", "-q", str(evil))
    git(evil, "config", "core.fsmonitor", str(monitor))
    link = tree.path / ".git"
    link.unlink()
    if tamper == "gitdir of its own":
        link.write_text(f"gitdir: {evil / '.git'}\n")
    elif tamper == "symlink":
        link.symlink_to(evil / ".git")
    elif tamper == "directory":
        git(tree.path, "init", "-q")
        git(tree.path, "config", "core.fsmonitor", str(monitor))
    for said in _every_operation_refuses(repo, tree):
        assert str(tree.git_dir) in said
    assert not ran.exists()
    assert git(evil, "for-each-ref").strip() == ""
    assert git(repo, "for-each-ref", "refs/shep").strip() == ""

    remove_worktree(repo, tree.path, force=True)  # `shep feat rm --force` still removes it
    assert not tree.path.exists()
    assert not ran.exists()
    assert evil.is_dir()
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1


@pytest.mark.parametrize("tamper", ["gitdir of its own", "symlink", "directory"])
def test_git_itself_follows_a_rewritten_git_file(repo: Path, tmp_path: Path, tamper: str) -> None:
    """What the test above guards against: git, asked about the worktree by its path as
    it is by default, runs the agent's fsmonitor command.
    """
    tree = feature_worktree(repo, tmp_path)
    ran = tmp_path / "fsmonitor-ran"
    monitor = tmp_path / "fsmonitor"
    monitor.write_text(f'#!/bin/sh\necho ran >> "{ran}"\n')
    monitor.chmod(0o755)
    evil = tmp_path / "evil"
    git(tmp_path, "init", "-q", str(evil))
    git(evil, "config", "core.fsmonitor", str(monitor))
    link = tree.path / ".git"
    link.unlink()
    if tamper == "gitdir of its own":
        link.write_text(f"gitdir: {evil / '.git'}\n")
    elif tamper == "symlink":
        link.symlink_to(evil / ".git")
    else:
        git(tree.path, "init", "-q")
        git(tree.path, "config", "core.fsmonitor", str(monitor))
    git(tree.path, "status")
    assert ran.exists()


def test_filter_drivers_run_only_when_the_user_allows_them(repo: Path, tmp_path: Path) -> None:
    """A filter driver of git's config, named by a .gitattributes the agent writes, does not
    run when shep stages files; with ``drivers`` (the git_filters setting) it does.
    """
    ran = tmp_path / "filter-ran"
    git(repo, "config", "filter.x.clean", f"sh -c 'echo clean >> \"{ran}\"; cat'")
    git(repo, "config", "filter.x.required", "true")
    tree = feature_worktree(repo, tmp_path)
    (tree.path / ".gitattributes").write_text("*.txt filter=x\n")
    (tree.path / "data.txt").write_text("data\n")
    snapshot(tree, "refs/shep/runs/r/1", message="s")
    assert not ran.exists()
    snapshot(Checkout(tree.path, tree.git_dir, drivers=True), "refs/shep/runs/r/2", message="s")
    assert ran.exists()


def test_a_merge_driver_is_replaced_by_gits_own_merge(repo: Path, tmp_path: Path) -> None:
    """A merge driver of git's config does not run when shep computes the squash merge:
    git's own three-way merge of the file does, and merges both sides.
    """
    ran = tmp_path / "driver-ran"
    git(repo, "config", "merge.m.driver", f"sh -c 'echo ran >> \"{ran}\"; exit 1'")
    (repo / ".gitattributes").write_text("a.txt merge=m\n")
    git(repo, "add", ".gitattributes")
    git(repo, "commit", "-q", "-m", "attributes")
    tree = feature_worktree(repo, tmp_path)
    (tree.path / "a.txt").write_text("one\ntwo\nTHREE\n")
    commit_all(tree, "feature edit", branch="feat")
    (repo / "a.txt").write_text("ONE\ntwo\nthree\n")
    git(repo, "commit", "-q", "-am", "main edit")
    squash = prepare_squash(repo, "main", "feat", "Squash feat")
    assert squash.conflicts == []
    assert squash.commit is not None
    assert not ran.exists()
    shown = git(repo, "show", f"{squash.commit}:a.txt")
    assert shown == "ONE\ntwo\nTHREE\n"


# --- stale locks ------------------------------------------------------------------------------


def _git_stopped_holding_its_locks(tree: Checkout, tmp_path: Path) -> tuple[int, int]:
    """A real `git commit` in the worktree, stopped while it holds its ref locks (its
    reference-transaction hook sleeps in the "prepared" state); (git's pid, the hook's)."""
    hooks = tmp_path / "slow-hooks"
    hooks.mkdir()
    pids = tmp_path / "pids"
    hook = hooks / "reference-transaction"
    hook.write_text(
        '#!/bin/sh\n[ "$1" = prepared ] || exit 0\n'
        f'echo "$PPID $$" > "{pids}.tmp" && mv "{pids}.tmp" "{pids}"\n'
        "exec sleep 60\n"
    )
    hook.chmod(0o755)
    command = ["commit", "-q", "--allow-empty", "-m", "interrupted"]
    subprocess.Popen(
        ["git", "-C", str(tree.path), "-c", f"core.hooksPath={hooks}", *command],
        env={
            **os.environ,
            **SETUP_IDENTITY,
            "GIT_DIR": str(tree.git_dir),
            "GIT_WORK_TREE": str(tree.path),
        },
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while not pids.exists():
        assert time.monotonic() < deadline, "git never reached its reference-transaction hook"
        time.sleep(0.02)
    git_pid, hook_pid = (int(n) for n in pids.read_text().split())
    return git_pid, hook_pid


def _kill(*pids: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
    for pid in pids:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            deadline = time.monotonic() + 10
            while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
                time.sleep(0.02)


def test_locks_left_by_a_killed_git_are_removed(repo: Path, tmp_path: Path) -> None:
    """A git SIGKILLed while it held HEAD.lock and the branch's lock leaves them behind;
    shep's next commit there (by the branch's name) finds no live git holding the
    branch's lock, removes it and commits.
    """
    tree = feature_worktree(repo, tmp_path)
    git_pid, hook_pid = _git_stopped_holding_its_locks(tree, tmp_path)
    _kill(git_pid, hook_pid)
    assert tree.git_dir is not None
    branch_lock = repo / ".git" / "refs" / "heads" / "feat.lock"
    assert branch_lock.exists()
    (tree.path / "f.txt").write_text("after the kill\n")
    commit = commit_all(tree, "after the kill", branch="feat")
    assert commit == git(repo, "rev-parse", "feat").strip()
    assert not branch_lock.exists()


def test_a_lock_held_by_a_running_git_is_said_and_left_alone(repo: Path, tmp_path: Path) -> None:
    """While a live git holds the worktree's locks, shep's commit there fails with one line
    naming the lock and who holds it, and removes nothing.
    """
    tree = feature_worktree(repo, tmp_path)
    git_pid, hook_pid = _git_stopped_holding_its_locks(tree, tmp_path)
    try:
        (tree.path / "f.txt").write_text("meanwhile\n")
        with pytest.raises(GitError, match=r"\.lock is held by a running process \(pid \d+\)") as e:
            commit_all(tree, "meanwhile", branch="feat")
        assert "\n" not in str(e.value)
        assert tree.git_dir is not None
        assert (tree.git_dir / "HEAD.lock").exists()
    finally:
        _kill(git_pid, hook_pid)


# --- paths through symbolic links -------------------------------------------------------------


def test_restore_paths_never_removes_a_file_through_a_symbolic_link(
    repo: Path, tmp_path: Path
) -> None:
    """A committed link ``out -> <outside>``: restoring ``out/victim.txt`` (absent from the
    commit, so it would be removed) leaves the outside file alone and says why.
    """
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim.txt"
    victim.write_text("precious\n")
    (repo / "out").symlink_to(outside)
    git(repo, "add", "out")
    git(repo, "commit", "-q", "-m", "a link")
    tree = feature_worktree(repo, tmp_path)
    base = git(repo, "rev-parse", "HEAD").strip()
    (tree.path / "src" / "gone.py").write_text("half-written\n")
    refused = restore_paths(tree, base, ["out/victim.txt", "src/gone.py"])
    assert victim.read_text() == "precious\n"
    assert not (tree.path / "src" / "gone.py").exists()
    assert len(refused) == 1
    assert "out/victim.txt goes through out, a symbolic link" in refused[0]


@pytest.mark.parametrize(
    ("path", "problem"),
    [
        ("../escape.txt", "does not name a file inside"),
        ("a/../../escape.txt", "does not name a file inside"),
        ("/etc/passwd", "is not inside"),
        ("", "does not name a file inside"),
        ("link/file.txt", "goes through link, a symbolic link"),
        ("dir/inner-link/file.txt", "goes through dir/inner-link, a symbolic link"),
        ("leaf-link", "goes through leaf-link, a symbolic link"),
    ],
)
def test_inside_worktree_refuses_what_leads_out(tmp_path: Path, path: str, problem: str) -> None:
    """``..``, absolute paths and a symbolic link anywhere on the way are refused in one
    line, whether the link points out or not."""
    root = tmp_path / "root"
    (root / "dir").mkdir(parents=True)
    (root / "link").symlink_to(tmp_path)
    (root / "dir" / "inner-link").symlink_to(root / "dir")
    (root / "leaf-link").symlink_to(tmp_path / "secret")
    with pytest.raises(UnsafePathError, match=problem) as e:
        inside_worktree(root, path)
    assert "\n" not in str(e.value)


def test_inside_worktree_accepts_what_stays_inside(tmp_path: Path) -> None:
    """Plain paths (existing or to be made), absolute ones under the root, and, for an
    operation on the link itself, a link as the last part."""
    root = tmp_path / "root"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("x\n")
    (root / "leaf-link").symlink_to(tmp_path)
    assert inside_worktree(root, "src/app.py") == root / "src" / "app.py"
    assert inside_worktree(root, "new/dir/file.txt") == root / "new" / "dir" / "file.txt"
    assert inside_worktree(root, root / "src" / "./app.py") == root / "src" / "app.py"
    assert inside_worktree(root, "leaf-link", leaf_link=True) == root / "leaf-link"
    with pytest.raises(UnsafePathError):
        inside_worktree(root, "leaf-link/x", leaf_link=True)


def test_read_inside_reads_no_file_through_a_link(tmp_path: Path) -> None:
    """A file is read; a link to a file outside is not (nor is a missing file)."""
    root = tmp_path / "root"
    root.mkdir()
    (root / "spec.yaml").write_text("name: x\n")
    secret = tmp_path / "secret"
    secret.write_text("token\n")
    (root / "link.yaml").symlink_to(secret)
    assert read_inside(root, "spec.yaml") == b"name: x\n"
    with pytest.raises(UnsafePathError):
        read_inside(root, "link.yaml")
    with pytest.raises(FileNotFoundError):
        read_inside(root, "missing.yaml")


@pytest.mark.timeout(20)
def test_read_inside_opens_no_named_pipe_and_reads_no_directory(tmp_path: Path) -> None:
    """A named pipe the agent made where a file is expected (``package.json``) is refused at
    once: opening it to read would wait for a writer forever. A directory is an OSError,
    as reading one is.
    """
    root = tmp_path / "root"
    root.mkdir()
    os.mkfifo(root / "package.json")
    (root / "specs").mkdir()
    with pytest.raises(UnsafePathError, match="not a regular file"):
        read_inside(root, "package.json")
    with pytest.raises(IsADirectoryError):
        read_inside(root, "specs")


def test_a_worktree_whose_head_was_pointed_at_another_branch_commits_on_its_own(
    repo: Path, tmp_path: Path
) -> None:
    """The agent points its worktree's HEAD at the user's ``main``: shep's commit still
    lands on the feature branch, and ``main`` does not move. (Plain git commits on main.)
    """
    tree = feature_worktree(repo, tmp_path)
    main = git(repo, "rev-parse", "main").strip()
    git(tree.path, "symbolic-ref", "HEAD", "refs/heads/main")
    (tree.path / "f.txt").write_text("agent work\n")
    commit = commit_all(tree, "the feature", branch="feat")
    assert commit == git(repo, "rev-parse", "feat").strip()
    assert git(repo, "rev-parse", "main").strip() == main
    assert "f.txt" in git(repo, "ls-tree", "--name-only", "feat").split()

    (tree.path / "g.txt").write_text("more\n")
    git(tree.path, "add", "g.txt")
    git(tree.path, "commit", "-q", "-m", "plain git")
    assert git(repo, "rev-parse", "main").strip() != main


def test_a_merge_resolved_but_not_committed_is_concluded_as_git_commit_would(
    repo: Path, tmp_path: Path
) -> None:
    """The resolve step's agent merges the base into the branch, resolves the conflict and
    stages it, but does not commit: shep's commit concludes the merge (the base's tip its
    second parent, the merge's state cleared), so the squash merge no longer conflicts.
    """
    tree = feature_worktree(repo, tmp_path)
    (tree.path / "a.txt").write_text("one\ntwo\nFEATURE\n")
    commit_all(tree, "feature edit", branch="feat")
    (repo / "a.txt").write_text("one\ntwo\nMAIN\n")
    git(repo, "commit", "-q", "-am", "main edit")
    assert prepare_squash(repo, "main", "feat", "Squash feat").conflicts == ["a.txt"]
    main = git(repo, "rev-parse", "main").strip()
    tip = git(repo, "rev-parse", "feat").strip()
    merged = subprocess.run(
        ["git", "-C", str(tree.path), "merge", "-q", "main"], check=False, capture_output=True
    )
    assert merged.returncode != 0  # the conflict, left for the agent
    (tree.path / "a.txt").write_text("one\ntwo\nFEATURE and MAIN\n")
    git(tree.path, "add", "a.txt")

    commit = commit_all(tree, "the resolution", branch="feat")
    assert commit == git(repo, "rev-parse", "feat").strip()
    assert git(repo, "rev-list", "--parents", "-n", "1", "feat").split() == [commit, tip, main]
    assert tree.git_dir is not None
    assert not (tree.git_dir / "MERGE_HEAD").exists()
    assert not (tree.git_dir / "MERGE_MSG").exists()
    squash = prepare_squash(repo, "main", "feat", "Squash feat")
    assert squash.conflicts == []
    assert squash.commit is not None
    assert git(repo, "show", f"{squash.commit}:a.txt") == "one\ntwo\nFEATURE and MAIN\n"


# --- the repository's config names another repository, or another work tree ------------------


def _promisor(repository: Path, remote: Path, ran: Path) -> None:
    """Make ``repository`` a partial clone of ``remote``, whose objects git fetches on demand
    by running ``uploadpack``: a command that writes ``ran`` first."""
    git(repository, "config", "core.repositoryformatversion", "1")
    git(repository, "config", "extensions.partialClone", "origin")
    git(repository, "config", "remote.origin.url", str(remote))
    git(repository, "config", "remote.origin.promisor", "true")
    git(repository, "config", "remote.origin.uploadpack", f'echo ran >> "{ran}"; git-upload-pack')


def test_no_object_is_fetched_on_demand_from_the_users_checkout(repo: Path, tmp_path: Path) -> None:
    """The agent, working in the user's checkout (``shep run``), makes it a partial clone
    whose "remote" runs a command, and deletes an object a snapshot needs: git would fetch
    it on demand and run the command. shep's snapshot fetches nothing, runs nothing and
    fails in one line. (Plain git runs the command.)
    """
    ran = tmp_path / "uploadpack-ran"
    remote = make_repo(tmp_path / "remote")
    _promisor(repo, remote, ran)
    head = git(repo, "rev-parse", "HEAD").strip()
    (repo / ".git" / "objects" / head[:2] / head[2:]).unlink()
    (repo / "new.txt").write_text("agent work\n")
    with pytest.raises(GitError) as e:
        snapshot(repo, "refs/shep/runs/r/1", message="s")
    assert "\n" not in str(e.value)
    assert not ran.exists()

    subprocess.run(
        ["git", "-C", str(repo), "cat-file", "-p", head], check=False, capture_output=True
    )
    assert ran.exists()


def test_a_rewritten_commondir_stops_every_git_command_and_runs_nothing(
    repo: Path, tmp_path: Path
) -> None:
    """The agent rewrites the ``commondir`` file of its worktree's git directory (its own
    git writes beside it) to name a repository it made: a partial clone whose "remote"
    runs a command. Every git operation shep makes there refuses in one line, nothing
    lands in either repository and the command never runs. (Plain git, by the
    worktree's path, follows ``commondir`` and runs it.)
    """
    tree = feature_worktree(repo, tmp_path)
    assert tree.git_dir is not None
    ran = tmp_path / "uploadpack-ran"
    evil = tmp_path / "evil.git"
    git(tmp_path, "init", "-q", "--bare", str(evil))
    _promisor(evil, make_repo(tmp_path / "remote"), ran)
    (tree.git_dir / "commondir").write_text(f"{evil}\n")
    (tree.path / "new.txt").write_text("agent work\n")
    for said in _every_operation_refuses(repo, tree):
        assert f"{tree.git_dir / 'commondir'} says" in said
    assert not ran.exists()
    assert git(repo, "for-each-ref", "refs/shep").strip() == ""
    assert not (evil / "refs" / "shep").exists()

    (tree.git_dir / "commondir").write_text("../..\n")  # put back, as the message says
    assert snapshot(tree, "refs/shep/runs/r/1", message="s")
    (tree.git_dir / "commondir").write_text(f"{evil}\n")
    blob = git(repo, "rev-parse", "HEAD:a.txt").strip()
    subprocess.run(
        ["git", "-C", str(tree.path), "cat-file", "-p", blob], check=False, capture_output=True
    )
    assert ran.exists()


def test_a_snapshot_of_the_users_checkout_takes_its_files_whatever_core_worktree_says(
    repo: Path, tmp_path: Path
) -> None:
    """The agent sets ``core.worktree`` of the user's checkout to a directory outside it:
    shep's snapshot still takes the checkout's own files, and none from there. (Plain git
    takes that directory for the work tree.)
    """
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "id_rsa").write_text("SECRET KEY\n")
    git(repo, "config", "core.worktree", str(outside))
    (repo / "new.txt").write_text("agent work\n")
    sha = snapshot(repo, "refs/shep/runs/r/1", message="s")
    files = git(repo, "ls-tree", "-r", "--name-only", sha).split()
    assert "id_rsa" not in files
    assert {"new.txt", "a.txt", "src/app.py"} <= set(files)

    assert "id_rsa" in git(repo, "status", "--porcelain", "--untracked-files=all")


def test_the_work_tree_is_found_as_git_finds_it(repo: Path, tmp_path: Path) -> None:
    """From a subdirectory, past a ``.git`` that is no repository (an empty vendored one),
    to the checkout's root; a linked worktree's root by its ``.git`` file; nothing inside a
    git directory or a bare repository."""
    vendored = repo / "vendor" / "lib"
    (vendored / ".git").mkdir(parents=True)
    assert Checkout(vendored).work_tree == repo
    assert Checkout(repo / "src").work_tree == repo
    tree = feature_worktree(repo, tmp_path)
    assert Checkout(tree.path).work_tree == tree.path
    assert Checkout(repo / ".git" / "refs").work_tree is None
    git(tmp_path, "init", "-q", "--bare", str(tmp_path / "bare.git"))
    assert Checkout(tmp_path / "bare.git").work_tree is None
