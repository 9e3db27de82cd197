"""Snapshots of a worktree as commits under shep's refs, restoring them, and commits on
shep's own worktree branch: through a private index, so the worktree's own index and
HEAD are never touched by a snapshot.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path

from events.errors import UnsafePathError
from shep.git.command import (
    Checkout,
    checkout,
    run_git,
    run_git_as_author,
)
from shep.git.repo import Where, peeled, resolve_commit, tree_of


def _index_and_head(worktree: Checkout) -> tuple[Path, str | None]:
    """The worktree's index file and its HEAD commit (None on an unborn branch)."""
    done = run_git(
        worktree,
        "rev-parse",
        "--git-path",
        "index",
        "--verify",
        "-q",
        "HEAD",
        doing=f"find the index and HEAD of {worktree.path}",
        ok=(0, 1),
    )
    index, _, head = done.stdout.partition("\n")
    return worktree.path / index, head.strip() or None


@contextmanager
def _private_index(index: Path) -> Iterator[dict[str, str]]:
    """An environment whose GIT_INDEX_FILE is a temporary copy of the ``index`` file.

    The copy's stat cache lets ``git add -A`` hash only the files that changed.
    ``copy2`` keeps the index file's mtime, which git compares with the files' mtimes
    to spot "racily clean" entries; a fresh mtime would hide an edit made in the same
    second the real index was written.
    """
    with tempfile.TemporaryDirectory(prefix="shep-index-") as tmp:
        private = Path(tmp) / "index"
        if index.exists():
            shutil.copy2(index, private)
        yield {"GIT_INDEX_FILE": str(private)}


def _write_tree(worktree: Checkout, env: Mapping[str, str]) -> str:
    """Stage every file of the worktree (untracked ones too, ignored ones not) into the
    index ``env`` names, and write it as a tree; its sha.
    """
    run_git(
        worktree,
        "-c",
        "core.splitIndex=false",  # a private index must not write shared index files
        "-c",
        "advice.addEmbeddedRepo=false",
        "add",
        "-A",
        env=env,
        doing=f"stage the files of {worktree.path}",
    )
    return run_git(worktree, "write-tree", env=env, doing="write a tree").stdout.strip()


def snapshot(worktree: Where, ref: str, *, message: str) -> str:
    """Commit the worktree's files exactly as they are now (tracked and untracked, not
    ignored; edits made by any means) under ``ref``, with the worktree's HEAD as parent.

    HEAD, the index and the branch are left alone: the files are staged into a private
    copy of the index. Returns the commit's sha; an unchanged worktree gives the same tree.
    """
    at = checkout(worktree)
    index, head = _index_and_head(at)
    with _private_index(index) as env:
        tree = _write_tree(at, env)
    commit = run_git_as_author(
        at,
        "commit-tree",
        tree,
        *(["-p", head] if head else []),
        "-m",
        message,
        doing="commit the snapshot",
    ).stdout.strip()
    run_git(
        at,
        "update-ref",
        "-m",
        f"shep: {message.splitlines()[0] if message else 'snapshot'}",
        ref,
        commit,
        doing=f"store the snapshot as {ref}",
    )
    return commit


def files_tree(worktree: Where) -> str:
    """The tree of the worktree's files as they are now, as ``snapshot`` would commit them
    (tracked and untracked, not ignored); HEAD, the index and the branch untouched.
    """
    at = checkout(worktree)
    with _private_index(_index_and_head(at)[0]) as env:
        return _write_tree(at, env)


def restore(worktree: Where, commit: str) -> None:
    """Make the worktree's files exactly those of ``commit``'s tree (or of the tree
    ``commit`` is): changed files are rewritten, missing ones created, and files not in
    the tree removed, whether tracked or untracked (ignored files are left alone). HEAD,
    the branch and the real index are not touched, so afterwards ``git status`` shows the
    restored work as uncommitted changes against HEAD.

    How: a private copy of the index takes in every current file (``add -A``), so the
    current state is a tree; then ``read-tree -m -u <current> <commit>`` (git's own
    switch between two trees) rewrites only the files that differ between the two. An
    ignored file where the commit has a file is overwritten (git >= 2.35 treats ignored
    files as expendable there). Git writes no file through a symbolic link.
    """
    at = checkout(worktree)
    target = tree_of(at, commit)
    with _private_index(_index_and_head(at)[0]) as env:
        current = _write_tree(at, env)
        run_git(
            at,
            "read-tree",
            "-m",
            "-u",
            current,
            target,
            env=env,
            doing=f"restore {at.path} to {commit}",
        )


def restore_paths(worktree: Where, commit: str, paths: Sequence[str]) -> list[str]:
    """Make each of ``paths`` as it is in ``commit``: rewritten, or removed when the commit
    has no such file. HEAD, the branch and the index are untouched.

    A path that leads out of the worktree (``..``, or a symbolic link on the way: see
    ``shep.git.worktree.inside_worktree``) is left alone; those are returned, each with why.
    """
    from shep.git.worktree import inside_worktree

    at = checkout(worktree)
    target = resolve_commit(at, commit)
    refused: list[str] = []
    for path in paths:
        try:
            inside_worktree(at.path, path, leaf_link=True)
        except UnsafePathError as e:
            refused.append(str(e))
            continue
        there = run_git(
            at, "cat-file", "-e", f"{target}:{path}", doing="look up a file", ok=(0, 1, 128)
        )
        if there.returncode == 0:
            run_git(
                at,
                "restore",
                f"--source={target}",
                "--worktree",
                "--",
                path,
                doing=f"restore {path} from {target[:10]}",
            )
        else:
            # A link itself may go (its target is untouched).
            with suppress(FileNotFoundError, NotADirectoryError):
                inside_worktree(at.path, path, leaf_link=True).unlink()
    return refused


def commit_all(worktree: Where, message: str, *, branch: str) -> str | None:
    """Stage everything (``add -A``) and commit it on ``branch``, the worktree's branch; the
    new commit's sha, or None when nothing changed. No hook runs (see ``shep.git.command``):
    the commits are shep's record of the agent's work, not the user's.

    The commit is made on ``branch`` by name (its ref moved from the tip the commit was made
    on, compare-and-set), never through the worktree's HEAD: the agent can point HEAD at
    another branch, the user's base say, and shep would then commit there. A merge left
    uncommitted in the worktree (``git merge`` with its conflicts resolved and staged, not
    committed: the resolve step, or a person) is concluded as ``git commit`` would: the
    commit has the merged commit as its second parent, and the merge's state is cleared.
    """
    at = checkout(worktree)
    ref = f"refs/heads/{branch}"
    run_git(at, "add", "-A", doing=f"stage the files of {at.path}")
    tree = run_git(at, "write-tree", doing="write a tree").stdout.strip()
    tip = resolve_commit(at, ref)
    merging = peeled(at, "MERGE_HEAD", "commit")
    if not merging and tree_of(at, tip) == tree:
        return None
    parents = ["-p", tip, *(["-p", merging] if merging else [])]
    commit = run_git_as_author(
        at, "commit-tree", tree, *parents, "-m", message, doing=f"commit in {at.path}"
    ).stdout.strip()
    run_git(
        at,
        "update-ref",
        "-m",
        f"shep: {message.splitlines()[0] if message else 'commit'}",
        ref,
        commit,
        tip,
        doing=f"move {branch} to its new commit",
        fix=f"{branch} moved meanwhile; retry.",
    )
    if merging:
        run_git(at, "merge", "--quit", doing=f"clear the concluded merge in {at.path}")
    return commit
