"""The git operations of the feature workflow: queries, branches and worktrees, snapshots.

Everything runs the ``git`` command line through ``shep.git.command.run_git``, never a
library: with nothing the repository or the agent wrote run on the way (no hook, no
fsmonitor, no filter or merge driver unless the user opted in), and a feature worktree
addressed through the git directory shep made for it (a ``Checkout``), not through the
``.git`` file in the worktree. The merge into the user's branch, pushes and pull
requests are in ``shep.git.merge``.

Every failure is a :class:`GitError` whose one line says what failed, git's own reason
and what to do. Nothing here moves a user's HEAD, index or checked-out branch unless
that is the function's purpose: ``commit_all`` commits on shep's own worktree branch.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import unicodedata
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from events.errors import GitError, NotARepositoryError, UnsafePathError, WorktreeLinkChangedError
from shep.git.command import (
    Checkout,
    StrPath,
    check_link,
    checkout,
    reason,
    run_git,
    run_git_as_author,
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
    done = run_git(
        repo,
        "rev-parse",
        "--verify",
        "-q",
        "--end-of-options",
        f"{ref}^{{commit}}",
        doing=f"resolve {ref!r}",
        ok=(0, 1, 128),
    )
    sha = done.stdout.strip()
    if done.returncode != 0 or not sha:
        where = checkout(repo).path
        raise GitError(f"{ref!r} is not a commit in {where}; check the branch or sha.")
    return sha


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


def describe_files(files: list[str], limit: int = 5) -> str:
    """A few of ``files``, then how many more: for one-line messages."""
    shown = ", ".join(files[:limit])
    return shown + (f" and {len(files) - limit} more" if len(files) > limit else "")


# --- snapshots -----------------------------------------------------------------------


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


def restore(worktree: Where, commit: str) -> None:
    """Make the worktree's files exactly those of ``commit``'s tree: changed files are
    rewritten, missing ones created, and files not in the tree removed, whether tracked
    or untracked (ignored files are left alone). HEAD, the branch and the real index are
    not touched, so afterwards ``git status`` shows the restored work as uncommitted
    changes against HEAD.

    How: a private copy of the index takes in every current file (``add -A``), so the
    current state is a tree; then ``read-tree -m -u <current> <commit>`` (git's own
    switch between two trees) rewrites only the files that differ between the two. An
    ignored file where the commit has a file is overwritten (git >= 2.35 treats ignored
    files as expendable there). Git writes no file through a symbolic link.
    """
    at = checkout(worktree)
    target = resolve_commit(at, commit)
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


def commit_all(worktree: Where, message: str) -> str | None:
    """Stage everything (``add -A``) and commit it on the worktree's branch; the new
    commit's sha, or None when nothing changed. No hook runs (see ``shep.git.command``):
    the commits are shep's record of the agent's work, not the user's.
    """
    at = checkout(worktree)
    run_git(at, "add", "-A", doing=f"stage the files of {at.path}")
    staged = run_git(
        at,
        "diff",
        "--cached",
        "--quiet",
        "--no-ext-diff",
        "--no-textconv",
        doing="check for staged changes",
        ok=(0, 1),
    )
    if staged.returncode == 0:
        return None
    run_git_as_author(
        at,
        "commit",
        "--quiet",
        "--no-verify",
        "--no-gpg-sign",
        "-m",
        message,
        doing=f"commit in {at.path}",
    )
    head = _index_and_head(at)[1]
    assert head is not None  # we just committed
    return head


def newest_ref_number(repo: Where, prefix: str) -> int:
    """The highest ``N`` among the refs ``PREFIX/N`` (0 when there is none)."""
    names = run_git(
        repo, "for-each-ref", "--format=%(refname)", prefix, doing=f"list the refs under {prefix}"
    ).stdout.split()
    numbers = [int(n.rsplit("/", 1)[1]) for n in names if n.rsplit("/", 1)[1].isdigit()]
    return max(numbers, default=0)


def tree_of(repo: Where, commit: str) -> str:
    """The sha of ``commit``'s tree: the same for the same files, whatever the history."""
    done = run_git(
        repo,
        "rev-parse",
        "--verify",
        "-q",
        "--end-of-options",
        f"{commit}^{{tree}}",
        doing=f"read the tree of {commit}",
    )
    return done.stdout.strip()
