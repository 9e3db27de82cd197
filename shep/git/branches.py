"""A feature's branch and worktree: naming them, adding, removing, and deleting the branch.

A worktree shep made is addressed through the git directory shep made for it (a
``Checkout``); a worktree whose ``.git`` link the agent changed is refused.
"""

from __future__ import annotations

import os
import re
import shutil
import unicodedata
from contextlib import suppress
from pathlib import Path

from events.errors import GitError, WorktreeLinkChangedError
from shep.git.command import (
    Checkout,
    StrPath,
    check_link,
    checkout,
    run_git,
)
from shep.git.repo import Where, branch_exists, describe_files, dirty_files, same_path, worktrees


def slugify(text: str, max_len: int = 40) -> str:
    """``text`` as lowercase ascii words joined by ``-``, cut at a word boundary to at
    most ``max_len`` characters; ``feature`` when no word is left.
    """
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    slug = ""
    for word in re.findall(r"[a-z0-9]+", ascii_text.lower()):
        candidate = f"{slug}-{word}" if slug else word
        if len(candidate) > max_len:
            slug = slug or word[:max_len]
            break
        slug = candidate
    return slug or "feature"


def free_branch_name(
    repo: Where, prefix: str, slug: str, *, worktrees_dir: StrPath | None = None
) -> str:
    """``prefix + slug``, or ``prefix + slug-N`` (N = 2, 3, ...) when that branch exists
    or, given ``worktrees_dir``, when ``worktrees_dir/<slug or slug-N>`` (the worktree
    directory it would get) exists. GitError when the name is not a valid branch name.
    """
    for n in range(1, 1000):
        name = slug if n == 1 else f"{slug}-{n}"
        branch = prefix + name
        taken_dir = worktrees_dir is not None and os.path.lexists(Path(worktrees_dir) / name)
        if not taken_dir and not branch_exists(repo, branch):
            run_git(
                repo,
                "check-ref-format",
                "--branch",
                branch,
                doing=f"use {branch!r} as a branch name",
                fix="Choose another branch prefix.",
                ok=(0,),
            )
            return branch
    raise GitError(f"Cannot find a free branch name for {prefix}{slug}; delete old branches.")


def add_worktree(
    repo: StrPath, path: StrPath, branch: str, base_sha: str, *, drivers: bool = False
) -> Path:
    """Create branch ``branch`` at ``base_sha`` and check it out in a new worktree at
    ``path`` (its parent directories created); the git directory git made for it (to
    record: shep's git reaches the worktree through it, see ``shep.git.worktree``).

    Idempotent, so a step that crashed half-way can run again: nothing happens when
    ``path`` already is a worktree of ``repo`` on ``branch``; when only the branch
    exists (the worktree was never made or was pruned) it is checked out as it is.
    GitError when ``path`` exists as anything else. ``drivers``: the checkout may run
    the filter drivers of git's config (the ``git_filters`` setting).
    """
    target = Path(path)
    at = Checkout(Path(repo), drivers=drivers)
    if os.path.lexists(target):
        for tree in worktrees(at):
            if same_path(tree.path, target) and tree.branch == branch:
                return _git_dir_of(at, target)
        raise GitError(
            f"{target} already exists and is not a worktree on {branch}; "
            "move it away or choose another path."
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    # A worktree directory deleted by hand stays registered until pruned, and git
    # refuses to add a new one at its path.
    run_git(at, "worktree", "prune", doing="prune stale worktrees")
    create = [] if branch_exists(at, branch) else ["-b", branch]
    start = [branch] if not create else [base_sha]
    run_git(
        at,
        "worktree",
        "add",
        "--quiet",
        *create,
        os.fspath(target),
        *start,
        doing=f"create worktree {target} on {branch}",
    )
    return _git_dir_of(at, target)


def worktree_git_dir(repo: Where, worktree: StrPath) -> Path | None:
    """The git directory of ``repo``'s linked worktree at ``worktree``, as ``repo``'s own
    records say (``<common dir>/worktrees/<name>/gitdir`` naming ``worktree/.git``), never
    as the worktree's ``.git`` file says; None when ``repo`` has no such worktree.
    """
    done = run_git(
        repo,
        "rev-parse",
        "--path-format=absolute",
        "--git-common-dir",
        doing=f"find the git directory of {checkout(repo).path}",
    )
    admin = Path(done.stdout.strip()) / "worktrees"
    wanted = os.path.realpath(Path(worktree) / ".git")
    try:
        entries = sorted(admin.iterdir())
    except OSError:
        return None
    for entry in entries:
        try:
            named = (entry / "gitdir").read_text(encoding="utf-8", errors="surrogateescape")
        except OSError:
            continue
        if os.path.realpath(named.strip()) == wanted:
            return entry
    return None


def _git_dir_of(repo: Checkout, worktree: Path) -> Path:
    found = worktree_git_dir(repo, worktree)
    if found is None:
        raise GitError(f"git made the worktree {worktree} but {repo.path} does not list it.")
    return found


def remove_worktree(repo: Where, worktree: Where, *, force: bool) -> None:
    """Remove the worktree at ``worktree`` and prune stale worktree entries.

    A missing directory is fine (its entry is pruned). Without ``force`` it is refused
    when the worktree has uncommitted or untracked files (checked through the git
    directory ``repo`` records for it, never the worktree's own ``.git`` file); ``force``
    removes it anyway, even when locked or when its ``.git`` file was rewritten. GitError
    when it exists but is not a worktree of ``repo``.
    """
    target = checkout(worktree).path
    registered = any(same_path(tree.path, target) for tree in worktrees(repo))
    if registered and target.exists():
        tree = worktree if isinstance(worktree, Checkout) else None
        git_dir = tree.git_dir if tree and tree.git_dir else worktree_git_dir(repo, target)
        if force and git_dir is not None:
            _relink(target, git_dir)
        if not force:
            dirty = dirty_files(Checkout(target, git_dir)) if git_dir else []
            if dirty:
                raise GitError(
                    f"Cannot remove worktree {target}: it has uncommitted changes "
                    f"({describe_files(dirty)}). Commit or discard them, or remove it with "
                    "force."
                )
        # One --force: git's own check of the files (a `git status` that would enter
        # the worktree's nested repositories with their config) is ours, made above.
        run_git(
            repo,
            "worktree",
            "remove",
            *(["--force", "--force"] if force else ["--force"]),
            os.fspath(target),
            doing=f"remove worktree {target}",
            fix="Unlock it (`git worktree unlock`), or remove it with force.",
        )
    elif target.exists():
        raise GitError(f"{target} is not a worktree of {repo}; remove it by hand if unwanted.")
    run_git(repo, "worktree", "prune", doing="prune stale worktrees")


def _relink(worktree: Path, git_dir: Path) -> None:
    """Put back the ``.git`` file git wrote in ``worktree`` if something replaced it (git
    refuses to remove a worktree whose ``.git`` does not name its git directory); what
    was there goes with the worktree anyway.
    """
    try:
        check_link(worktree, git_dir)
        return
    except WorktreeLinkChangedError:
        pass
    link = worktree / ".git"
    if os.path.isdir(link) and not os.path.islink(link):
        shutil.rmtree(link)
    else:
        with suppress(FileNotFoundError):
            link.unlink()
    link.write_text(f"gitdir: {git_dir}\n")


def delete_branch(repo: Where, branch: str, *, force: bool) -> bool:
    """Delete local branch ``branch``; whether it is gone afterwards (deleted now, or
    already gone), as git's refs say once the command is over, whatever its exit status:
    a worker killed while git deleted it must not record a branch that is no longer there.

    Without ``force`` git refuses unless the branch is merged into HEAD or its upstream
    (a squash-merged branch is not, by git's reckoning: pass ``force`` after a merge):
    GitError, the branch still there.
    """
    if not branch_exists(repo, branch):
        return True
    try:
        run_git(
            repo,
            "branch",
            "-D" if force else "-d",
            "--",
            branch,
            doing=f"delete branch {branch}",
            fix="Merge it first or delete it with force.",
        )
    except GitError:
        if branch_exists(repo, branch):
            raise
    return not branch_exists(repo, branch)
