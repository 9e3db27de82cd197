"""Queries on a repository: its root, branches, commits, worktrees, what a branch changed.

Every call runs git through ``shep.git.command``; ``Where`` is a user's checkout (a path)
or a feature's ``Checkout``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from events.errors import GitError, NotARepositoryError
from shep.git.command import (
    Checkout,
    StrPath,
    checkout,
    reason,
    run_git,
)

#: Where a git operation works: a path (the user's own checkout) or a ``Checkout``.
Where = StrPath | Checkout


@dataclass(frozen=True)
class Worktree:
    """One working tree of a repository, as ``git worktree list`` reports it."""

    path: Path
    branch: str | None  # the short name (``main``), None when HEAD is detached
    head: str  # the commit checked out (all zeros on an unborn branch)


@dataclass(frozen=True)
class DiffStat:
    """What a branch changed: files, lines added and removed, and its commits."""

    files: int
    added: int
    removed: int
    commits: int


def same_path(a: StrPath, b: StrPath) -> bool:
    """Whether ``a`` and ``b`` are the same place once links are resolved."""
    return os.path.realpath(a) == os.path.realpath(b)


# --- queries -------------------------------------------------------------------------


def repo_root(path: StrPath, *, outside_git: bool = False) -> Path:
    """The root of the work tree that contains ``path``: the repository every command
    given a directory works on (``shep run`` and ``shep feat new`` alike), so that a
    subdirectory means its whole repository.

    NotARepositoryError when ``path`` is missing, not in a git repository, or in a bare
    repository (or inside a ``.git`` directory): shep needs a work tree. ``outside_git``: a
    directory that no git repository holds (or without git installed) is its own root.
    """
    where = Path(path)
    if not where.is_dir():
        raise NotARepositoryError(f"{where} is not a directory; give the path of a git repository.")
    if outside_git and shutil.which("git") is None:
        return where.resolve()
    done = run_git(
        where,
        "rev-parse",
        "--is-bare-repository",
        "--is-inside-git-dir",
        "--show-toplevel",
        doing=f"inspect {where}",
        ok=(0, 128),
    )
    answers = done.stdout.split("\n")
    if done.returncode == 0:
        return Path(answers[2])
    if answers[0] == "true":
        raise NotARepositoryError(
            f"{where} is a bare repository (it has no work tree); give a clone's path instead."
        )
    if answers[:2] == ["false", "true"]:
        raise NotARepositoryError(f"{where} is inside a .git directory; give the work tree's path.")
    if "not a git repository" in done.stderr:
        if outside_git:
            return where.resolve()
        raise NotARepositoryError(
            f"{where} is not a git repository; run `git init` there or pick a clone."
        )
    raise GitError(f"Cannot use {where} as a git repository: {reason(done.stderr)}.")


def current_branch(repo: Where) -> str | None:
    """The short name of the branch checked out at ``repo`` (None when HEAD is detached)."""
    done = run_git(
        repo, "symbolic-ref", "-q", "--short", "HEAD", doing="read the current branch", ok=(0, 1)
    )
    return done.stdout.strip() or None


def resolve_commit(repo: Where, ref: str) -> str:
    """The full sha of the commit ``ref`` names; GitError when it names none."""
    sha = peeled(repo, ref, "commit")
    if sha is None:
        where = checkout(repo).path
        raise GitError(f"{ref!r} is not a commit in {where}; check the branch or sha.")
    return sha


def peeled(repo: Where, name: str, kind: str) -> str | None:
    """The sha of the ``kind`` (commit, tree) that ``name`` names or leads to; None if none."""
    done = run_git(
        repo,
        "rev-parse",
        "--verify",
        "-q",
        "--end-of-options",
        f"{name}^{{{kind}}}",
        doing=f"resolve {name!r}",
        ok=(0, 1, 128),
    )
    return (done.stdout.strip() or None) if done.returncode == 0 else None


def commit_exists(repo: Where, sha: str) -> bool:
    """Whether ``sha`` is a commit present in ``repo``'s object store."""
    done = run_git(
        repo, "cat-file", "-e", f"{sha}^{{commit}}", doing=f"look up {sha}", ok=(0, 1, 128)
    )
    return done.returncode == 0


def branch_exists(repo: Where, name: str) -> bool:
    """Whether the local branch ``name`` exists."""
    done = run_git(
        repo,
        "show-ref",
        "--verify",
        "--quiet",
        f"refs/heads/{name}",
        doing=f"look up branch {name}",
        ok=(0, 1),
    )
    return done.returncode == 0


def dirty_files(repo: Where, *, untracked_ok: Collection[str] = ()) -> list[str]:
    """Paths with uncommitted changes at ``repo``: staged, unstaged, and untracked files
    that are not ignored (each file, not just its directory), except the untracked paths
    (from the root) in ``untracked_ok``. Empty when clean.

    A submodule counts as changed when its commit differs, not for the files in its own
    work tree: looking there would run git inside it, with that repository's config.
    """
    done = run_git(
        repo,
        "status",
        "--porcelain=v1",
        "-z",
        "--untracked-files=all",
        "--ignore-submodules=dirty",
        doing="list uncommitted changes",
    )
    files: list[str] = []
    entries = iter(done.stdout.split("\0"))
    for entry in entries:
        if not entry:
            continue
        if not (entry.startswith("??") and entry[3:] in untracked_ok):
            files.append(entry[3:])
        if entry[0] in "RC":  # a rename or copy: its source path follows
            next(entries, None)
    return files


def promisor_remote(repo: Where) -> str | None:
    """The remote a partial clone fetches its missing objects from on demand (its
    ``extensions.partialClone``, or a ``remote.<name>.promisor``); None for a full clone."""
    done = run_git(
        repo,
        "config",
        "--get-regexp",
        r"^(extensions\.partialclone|remote\..*\.promisor)$",
        doing="read whether the repository is a partial clone",
        ok=(0, 1),
    )
    for line in done.stdout.splitlines():
        key, _, value = line.partition(" ")
        if key == "extensions.partialclone" and value:
            return value
        if key.endswith(".promisor") and value.lower() in ("true", "yes", "on", "1"):
            return key.removeprefix("remote.").removesuffix(".promisor")
    return None


def has_remote(repo: Where) -> str | None:
    """The remote to push to: ``origin`` when it exists, else the first one; None if none."""
    remotes = run_git(repo, "remote", doing="list remotes").stdout.split()
    if "origin" in remotes:
        return "origin"
    return remotes[0] if remotes else None


def worktrees(repo: Where) -> list[Worktree]:
    """The repository's working trees, the main one first (a bare main entry is skipped)."""
    done = run_git(repo, "worktree", "list", "--porcelain", "-z", doing="list worktrees")
    found: list[Worktree] = []
    record: dict[str, str] = {}
    for item in [*done.stdout.split("\0"), ""]:
        if item:
            key, _, value = item.partition(" ")
            record[key] = value
            continue
        if "worktree" in record and "bare" not in record:
            branch = record.get("branch")
            found.append(
                Worktree(
                    path=Path(record["worktree"]),
                    branch=branch.removeprefix("refs/heads/") if branch else None,
                    head=record.get("HEAD", ""),
                )
            )
        record = {}
    return found


def diff_stat(repo: Where, base: str, head: str) -> DiffStat:
    """What ``head`` changed since it left ``base`` (from their merge base, like
    ``git diff base...head``): files, lines added and removed (a binary file counts as a
    file with no lines; a rename as one file), and the commits in ``base..head``.
    """
    done = run_git(
        repo,
        "diff",
        "--numstat",
        "-z",
        "--find-renames",  # whatever the user's diff.renames says
        "--no-ext-diff",
        "--no-textconv",
        f"{base}...{head}",
        "--",
        doing=f"diff {base}...{head}",
    )
    files = added = removed = 0
    fields = iter(done.stdout.split("\0"))
    for entry in fields:
        if not entry:
            continue
        plus, minus, path = entry.split("\t", 2)
        if not path:  # a rename: the old and new paths follow as fields of their own
            next(fields, None)
            next(fields, None)
        files += 1
        added += int(plus) if plus != "-" else 0
        removed += int(minus) if minus != "-" else 0
    count = run_git(
        repo, "rev-list", "--count", f"{base}..{head}", "--", doing=f"count {base}..{head}"
    )
    return DiffStat(files=files, added=added, removed=removed, commits=int(count.stdout))


def changed_paths(repo: Where, base: str, head: str) -> list[str]:
    """The paths ``head`` changed since it left ``base`` (a rename: both of its paths)."""
    done = run_git(
        repo,
        "diff",
        "--name-only",
        "-z",
        "--no-renames",
        "--no-ext-diff",
        "--no-textconv",
        f"{base}...{head}",
        "--",
        doing=f"diff {base}...{head}",
    )
    return [path for path in done.stdout.split("\0") if path]


# --- branches and worktrees ----------------------------------------------------------


def describe_files(files: list[str], limit: int = 5) -> str:
    """A few of ``files``, then how many more: for one-line messages."""
    shown = ", ".join(files[:limit])
    return shown + (f" and {len(files) - limit} more" if len(files) > limit else "")


# --- snapshots -----------------------------------------------------------------------


def newest_ref_number(repo: Where, prefix: str) -> int:
    """The highest ``N`` among the refs ``PREFIX/N`` (0 when there is none)."""
    names = run_git(
        repo, "for-each-ref", "--format=%(refname)", prefix, doing=f"list the refs under {prefix}"
    ).stdout.split()
    numbers = [int(n.rsplit("/", 1)[1]) for n in names if n.rsplit("/", 1)[1].isdigit()]
    return max(numbers, default=0)


def tree_of(repo: Where, commit: str) -> str:
    """The sha of ``commit``'s tree (or of the tree ``commit`` names): the same for the
    same files, whatever the history. GitError when it names neither.
    """
    sha = peeled(repo, commit, "tree")
    if sha is None:
        where = checkout(repo).path
        raise GitError(f"{commit!r} is not a commit (nor a tree) in {where}; check the sha.")
    return sha
