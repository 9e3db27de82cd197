"""The git operations of the feature workflow: worktrees, snapshots, merges, pushes, PRs.

Everything runs the ``git`` (and ``gh``) command line, never a library: ``git -C <path>``
with ``LC_ALL=C`` (the messages we read and quote are git's English ones),
``GIT_TERMINAL_PROMPT=0`` (a background worker must never wait on a password prompt),
``GIT_OPTIONAL_LOCKS=0`` (our ``git status`` must not rewrite the user's index behind
their back), no shell, captured output and a timeout. Variables that point git at
another repository (``GIT_DIR``, ``GIT_INDEX_FILE``, ...) are dropped, as git itself does
when it enters a submodule, so a shep started from a git hook still works on the path
it was given.

Every failure is a :class:`GitError` whose one line says what failed, git's own reason
and what to do. Nothing here moves a user's HEAD, index or checked-out branch unless
that is the function's purpose: ``commit_all`` commits on shep's own worktree branch and
``squash_merge`` advances the base branch.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import unicodedata
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from events.errors import GitError

StrPath = str | os.PathLike[str]

#: Seconds a local git command may take (a snapshot of a huge repository included).
GIT_TIMEOUT = 300.0
#: Seconds a command that talks to a server (push, ``gh``) may take.
NETWORK_TIMEOUT = 600.0

#: The identity of the commits shep makes when the user has configured none.
SHEP_NAME = "shep"
SHEP_EMAIL = "shep@localhost"

# What `git rev-parse --local-env-vars` lists: each would make `git -C path` work on some
# other repository, index or object store than the one at `path`.
_REPO_LOCAL_VARS = (
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_DIR",
    "GIT_GRAFT_FILE",
    "GIT_IMPLICIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_NO_REPLACE_OBJECTS",
    "GIT_OBJECT_DIRECTORY",
    "GIT_PREFIX",
    "GIT_REPLACE_REF_BASE",
    "GIT_SHALLOW_FILE",
    "GIT_WORK_TREE",
)


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


@dataclass(frozen=True)
class MergeResult:
    """The outcome of :func:`squash_merge`.

    Exactly one of: ``commit`` set (merged); ``conflicts`` non-empty (nothing changed);
    ``nothing`` true (the branch changes nothing on its base, so no commit was made).
    """

    commit: str | None
    conflicts: list[str] = field(default_factory=list)
    nothing: bool = False


@dataclass(frozen=True)
class PullRequest:
    """A pull request as ``gh pr view`` confirmed it."""

    url: str
    number: int


# --- running git ---------------------------------------------------------------------


def _env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _REPO_LOCAL_VARS}
    env.update(LC_ALL="C", GIT_TERMINAL_PROMPT="0", GIT_OPTIONAL_LOCKS="0")
    if extra:
        env.update(extra)
    return env


def _reason(stderr: str) -> str:
    """Git's own one-line reason: its first ``fatal:``/``error:`` line, else its first line."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for line in lines:
        for prefix in ("fatal: ", "error: "):
            if line.startswith(prefix):
                return line.removeprefix(prefix)[:300].rstrip(".")
    return lines[0][:300].rstrip(".") if lines else ""


def _subcommand(args: tuple[str, ...]) -> str:
    """The git command in ``args``, after any ``-c name=value`` options."""
    i = 0
    while i < len(args) - 1 and args[i] == "-c":
        i += 2
    return args[i] if i < len(args) else ""


def _git(
    where: StrPath,
    *args: str,
    doing: str,
    fix: str = "",
    env: Mapping[str, str] | None = None,
    ok: Collection[int] = (0,),
    timeout: float = GIT_TIMEOUT,
) -> subprocess.CompletedProcess[str]:
    """Run ``git -C where args``; raise GitError unless its exit code is in ``ok``.

    ``doing`` completes "Cannot ..." in the error; ``fix`` says what the user can do.
    """
    command = _subcommand(args)
    try:
        done = subprocess.run(
            ["git", "-C", os.fspath(where), *args],
            env=_env(env),
            capture_output=True,
            text=True,
            encoding="utf-8",
            errors="surrogateescape",  # paths are bytes; keep them round-trippable
            stdin=subprocess.DEVNULL,
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError as e:
        raise GitError("git is not installed or not on PATH; install git 2.38 or newer.") from e
    except subprocess.TimeoutExpired as e:
        raise GitError(
            f"Cannot {doing}: git {command} did not finish within {timeout:g}s in {where}."
        ) from e
    if done.returncode not in ok:
        reason = _reason(done.stderr) or f"git {command} exited with {done.returncode}"
        raise GitError(f"Cannot {doing}: {reason}." + (f" {fix}" if fix else ""))
    return done


def _identity_env(repo: StrPath) -> dict[str, str]:
    """Author and committer variables naming shep where the user configured no identity."""
    done = _git(
        repo,
        "config",
        "--get-regexp",
        r"^user\.(name|email)$",
        doing="read the user's git identity",
        ok=(0, 1),
    )
    configured = {line.split(" ", 1)[0] for line in done.stdout.splitlines()}
    env: dict[str, str] = {}
    for key, value in (("name", SHEP_NAME), ("email", SHEP_EMAIL)):
        if f"user.{key}" in configured:
            continue
        for who in ("AUTHOR", "COMMITTER"):
            var = f"GIT_{who}_{key.upper()}"
            if not os.environ.get(var):
                env[var] = value
    return env


def _git_as_user_or_shep(
    where: StrPath, *args: str, doing: str, fix: str = ""
) -> subprocess.CompletedProcess[str]:
    """Run a committing git command as the user when they configured an identity (in git's
    config or GIT_AUTHOR_*/GIT_COMMITTER_*), else as shep, filling only what is missing.

    So a commit never fails on "Please tell me who you are" and never carries a guessed
    ``user@hostname``. ``user.useConfigOnly`` makes the first try fail fast instead of
    guessing; only then is the config read (a snapshot saves a process this way).
    """
    try:
        return _git(where, "-c", "user.useConfigOnly=true", *args, doing=doing, fix=fix)
    except GitError:
        return _git(where, *args, env=_identity_env(where), doing=doing, fix=fix)


def _same_path(a: StrPath, b: StrPath) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


# --- queries -------------------------------------------------------------------------


def repo_root(path: StrPath) -> Path:
    """The root of the work tree that contains ``path``.

    GitError when ``path`` is missing, not in a git repository, or in a bare repository
    (or inside a ``.git`` directory): shep needs a work tree.
    """
    where = Path(path)
    if not where.is_dir():
        raise GitError(f"{where} is not a directory; give the path of a git repository.")
    done = _git(
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
        raise GitError(
            f"{where} is a bare repository (it has no work tree); give a clone's path instead."
        )
    if answers[:2] == ["false", "true"]:
        raise GitError(f"{where} is inside a .git directory; give the work tree's path.")
    if "not a git repository" in done.stderr:
        raise GitError(f"{where} is not a git repository; run `git init` there or pick a clone.")
    raise GitError(f"Cannot use {where} as a git repository: {_reason(done.stderr)}.")


def current_branch(repo: StrPath) -> str | None:
    """The short name of the branch checked out at ``repo`` (None when HEAD is detached)."""
    done = _git(
        repo, "symbolic-ref", "-q", "--short", "HEAD", doing="read the current branch", ok=(0, 1)
    )
    return done.stdout.strip() or None


def resolve_commit(repo: StrPath, ref: str) -> str:
    """The full sha of the commit ``ref`` names; GitError when it names none."""
    done = _git(
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
        raise GitError(f"{ref!r} is not a commit in {repo}; check the branch or sha.")
    return sha


def commit_exists(repo: StrPath, sha: str) -> bool:
    """Whether ``sha`` is a commit present in ``repo``'s object store."""
    done = _git(repo, "cat-file", "-e", f"{sha}^{{commit}}", doing=f"look up {sha}", ok=(0, 1, 128))
    return done.returncode == 0


def branch_exists(repo: StrPath, name: str) -> bool:
    """Whether the local branch ``name`` exists."""
    done = _git(
        repo,
        "show-ref",
        "--verify",
        "--quiet",
        f"refs/heads/{name}",
        doing=f"look up branch {name}",
        ok=(0, 1),
    )
    return done.returncode == 0


def dirty_files(repo: StrPath) -> list[str]:
    """Paths with uncommitted changes at ``repo``: staged, unstaged, and untracked files
    that are not ignored (each file, not just its directory). Empty when clean.
    """
    done = _git(
        repo,
        "status",
        "--porcelain=v1",
        "-z",
        "--untracked-files=all",
        doing="list uncommitted changes",
    )
    files: list[str] = []
    entries = iter(done.stdout.split("\0"))
    for entry in entries:
        if not entry:
            continue
        files.append(entry[3:])
        if entry[0] in "RC":  # a rename or copy: its source path follows
            next(entries, None)
    return files


def has_remote(repo: StrPath) -> str | None:
    """The remote to push to: ``origin`` when it exists, else the first one; None if none."""
    remotes = _git(repo, "remote", doing="list remotes").stdout.split()
    if "origin" in remotes:
        return "origin"
    return remotes[0] if remotes else None


def worktrees(repo: StrPath) -> list[Worktree]:
    """The repository's working trees, the main one first (a bare main entry is skipped)."""
    done = _git(repo, "worktree", "list", "--porcelain", "-z", doing="list worktrees")
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


def diff_stat(repo: StrPath, base: str, head: str) -> DiffStat:
    """What ``head`` changed since it left ``base`` (from their merge base, like
    ``git diff base...head``): files, lines added and removed (a binary file counts as a
    file with no lines; a rename as one file), and the commits in ``base..head``.
    """
    done = _git(
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
    count = _git(
        repo, "rev-list", "--count", f"{base}..{head}", "--", doing=f"count {base}..{head}"
    )
    return DiffStat(files=files, added=added, removed=removed, commits=int(count.stdout))


def changed_paths(repo: StrPath, base: str, head: str) -> list[str]:
    """The paths ``head`` changed since it left ``base`` (a rename: both of its paths)."""
    done = _git(
        repo,
        "diff",
        "--name-only",
        "-z",
        "--no-renames",
        "--no-ext-diff",
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
    repo: StrPath, prefix: str, slug: str, *, worktrees_dir: StrPath | None = None
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
            _git(
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


def add_worktree(repo: StrPath, path: StrPath, branch: str, base_sha: str) -> None:
    """Create branch ``branch`` at ``base_sha`` and check it out in a new worktree at
    ``path`` (its parent directories created).

    Idempotent, so a step that crashed half-way can run again: nothing happens when
    ``path`` already is a worktree of ``repo`` on ``branch``; when only the branch
    exists (the worktree was never made or was pruned) it is checked out as it is.
    GitError when ``path`` exists as anything else.
    """
    target = Path(path)
    if os.path.lexists(target):
        for tree in worktrees(repo):
            if _same_path(tree.path, target) and tree.branch == branch:
                return
        raise GitError(
            f"{target} already exists and is not a worktree on {branch}; "
            "move it away or choose another path."
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    # A worktree directory deleted by hand stays registered until pruned, and git
    # refuses to add a new one at its path.
    _git(repo, "worktree", "prune", doing="prune stale worktrees")
    create = [] if branch_exists(repo, branch) else ["-b", branch]
    start = [branch] if not create else [base_sha]
    _git(
        repo,
        "worktree",
        "add",
        "--quiet",
        *create,
        os.fspath(target),
        *start,
        doing=f"create worktree {target} on {branch}",
    )


def remove_worktree(repo: StrPath, path: StrPath, *, force: bool) -> None:
    """Remove the worktree at ``path`` and prune stale worktree entries.

    A missing directory is fine (its entry is pruned). Without ``force`` git refuses
    when the worktree has uncommitted or untracked files; ``force`` removes it anyway,
    even when locked. GitError when ``path`` exists but is not a worktree of ``repo``.
    """
    target = Path(path)
    registered = any(_same_path(tree.path, target) for tree in worktrees(repo))
    if registered and target.exists():
        _git(
            repo,
            "worktree",
            "remove",
            *(["--force", "--force"] if force else []),
            os.fspath(target),
            doing=f"remove worktree {target}",
            fix="Commit or discard its changes, or remove it with force.",
        )
    elif target.exists():
        raise GitError(f"{target} is not a worktree of {repo}; remove it by hand if unwanted.")
    _git(repo, "worktree", "prune", doing="prune stale worktrees")


def delete_branch(repo: StrPath, branch: str, *, force: bool) -> bool:
    """Delete local branch ``branch``; False when it did not exist.

    Without ``force`` git refuses unless the branch is merged into HEAD or its upstream
    (a squash-merged branch is not, by git's reckoning: pass ``force`` after a merge).
    """
    if not branch_exists(repo, branch):
        return False
    _git(
        repo,
        "branch",
        "-D" if force else "-d",
        "--",
        branch,
        doing=f"delete branch {branch}",
        fix="Merge it first or delete it with force.",
    )
    return True


# --- snapshots -----------------------------------------------------------------------


def _index_and_head(worktree: StrPath) -> tuple[Path, str | None]:
    """The worktree's index file and its HEAD commit (None on an unborn branch)."""
    done = _git(
        worktree,
        "rev-parse",
        "--git-path",
        "index",
        "--verify",
        "-q",
        "HEAD",
        doing=f"find the index and HEAD of {worktree}",
        ok=(0, 1),
    )
    index, _, head = done.stdout.partition("\n")
    return Path(worktree) / index, head.strip() or None


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


def _write_tree(worktree: StrPath, env: Mapping[str, str]) -> str:
    """Stage every file of the worktree (untracked ones too, ignored ones not) into the
    index ``env`` names, and write it as a tree; its sha.
    """
    _git(
        worktree,
        "-c",
        "core.splitIndex=false",  # a private index must not write shared index files
        "-c",
        "advice.addEmbeddedRepo=false",
        "add",
        "-A",
        env=env,
        doing=f"stage the files of {worktree}",
    )
    return _git(worktree, "write-tree", env=env, doing="write a tree").stdout.strip()


def snapshot(worktree: StrPath, ref: str, *, message: str) -> str:
    """Commit the worktree's files exactly as they are now (tracked and untracked, not
    ignored; edits made by any means) under ``ref``, with the worktree's HEAD as parent.

    HEAD, the index and the branch are left alone: the files are staged into a private
    copy of the index. Returns the commit's sha; an unchanged worktree gives the same tree.
    """
    index, head = _index_and_head(worktree)
    with _private_index(index) as env:
        tree = _write_tree(worktree, env)
    commit = _git_as_user_or_shep(
        worktree,
        "commit-tree",
        tree,
        *(["-p", head] if head else []),
        "-m",
        message,
        doing="commit the snapshot",
    ).stdout.strip()
    _git(
        worktree,
        "update-ref",
        "-m",
        f"shep: {message.splitlines()[0] if message else 'snapshot'}",
        ref,
        commit,
        doing=f"store the snapshot as {ref}",
    )
    return commit


def restore(worktree: StrPath, commit: str) -> None:
    """Make the worktree's files exactly those of ``commit``'s tree: changed files are
    rewritten, missing ones created, and files not in the tree removed, whether tracked
    or untracked (ignored files are left alone). HEAD, the branch and the real index are
    not touched, so afterwards ``git status`` shows the restored work as uncommitted
    changes against HEAD.

    How: a private copy of the index takes in every current file (``add -A``), so the
    current state is a tree; then ``read-tree -m -u <current> <commit>`` (git's own
    switch between two trees) rewrites only the files that differ between the two. An
    ignored file where the commit has a file is overwritten (git >= 2.35 treats ignored
    files as expendable there).
    """
    target = resolve_commit(worktree, commit)
    with _private_index(_index_and_head(worktree)[0]) as env:
        current = _write_tree(worktree, env)
        _git(
            worktree,
            "read-tree",
            "-m",
            "-u",
            current,
            target,
            env=env,
            doing=f"restore {worktree} to {commit}",
        )


def commit_all(worktree: StrPath, message: str) -> str | None:
    """Stage everything (``add -A``) and commit it on the worktree's branch; the new
    commit's sha, or None when nothing changed. Hooks are skipped (``--no-verify``):
    the commits are shep's record of the agent's work, not the user's.
    """
    _git(worktree, "add", "-A", doing=f"stage the files of {worktree}")
    staged = _git(
        worktree, "diff", "--cached", "--quiet", doing="check for staged changes", ok=(0, 1)
    )
    if staged.returncode == 0:
        return None
    _git_as_user_or_shep(
        worktree,
        "commit",
        "--quiet",
        "--no-verify",
        "--no-gpg-sign",
        "-m",
        message,
        doing=f"commit in {worktree}",
    )
    head = _index_and_head(worktree)[1]
    assert head is not None  # we just committed
    return head


# --- merging -------------------------------------------------------------------------


def _merge_tree(repo: StrPath, base_sha: str, tip: str) -> tuple[str, list[str]]:
    """The tree of merging ``tip`` into ``base_sha`` and its conflicted files, computed
    in the object store only (``merge-tree --write-tree``): no checkout is touched.
    """
    done = _git(
        repo,
        "merge-tree",
        "--write-tree",
        "--name-only",
        "-z",
        "--no-messages",
        base_sha,
        tip,
        doing=f"merge {tip[:12]} into {base_sha[:12]}",
        ok=(0, 1),
    )
    tree, *rest = done.stdout.split("\0")
    conflicts = [path for path in rest if path] if done.returncode == 1 else []
    return tree, conflicts


def describe_files(files: list[str], limit: int = 5) -> str:
    """A few of ``files``, then how many more: for one-line messages."""
    shown = ", ".join(files[:limit])
    return shown + (f" and {len(files) - limit} more" if len(files) > limit else "")


def squash_merge(repo: StrPath, base_branch: str, branch: str, message: str) -> MergeResult:
    """Squash-merge ``branch`` into ``base_branch`` in the user's repository ``repo``: one
    new commit on the base, with the base's tip as its only parent.

    The merge is always computed first with ``merge-tree --write-tree``, in the object
    store only, so a conflict changes nothing anywhere (MergeResult with the files), and
    a branch that changes nothing gives ``nothing=True`` and no commit. Then:

    - base checked out in ``repo``: refused (GitError naming the files) when that
      checkout has uncommitted changes; else ``git merge --ff-only`` to the squash
      commit, which moves the branch, index and files together, and refuses rather than
      overwrite anything if the checkout changed meanwhile.
    - base checked out nowhere: ``update-ref`` compare-and-set from the tip the merge
      was computed on (GitError if the base moved meanwhile).
    - base checked out in another worktree: GitError.

    The commit carries the user's identity when configured, else shep's.
    """
    root = repo_root(repo)
    base_ref = f"refs/heads/{base_branch}"
    old = resolve_commit(root, base_ref)
    tip = resolve_commit(root, f"refs/heads/{branch}")
    holder = next((tree for tree in worktrees(root) if tree.branch == base_branch), None)
    if holder is not None and not _same_path(holder.path, root):
        raise GitError(
            f"{base_branch} is checked out in {holder.path}; merge there, or switch that "
            "worktree to another branch and retry."
        )
    if holder is not None:
        dirty = dirty_files(root)
        if dirty:
            raise GitError(
                f"{base_branch} has uncommitted changes in {root} ({describe_files(dirty)}); "
                "commit or stash them and retry."
            )
    tree, conflicts = _merge_tree(root, old, tip)
    if conflicts:
        return MergeResult(commit=None, conflicts=conflicts)
    base_tree = _git(root, "rev-parse", f"{old}^{{tree}}", doing="read the base's tree")
    if tree == base_tree.stdout.strip():
        return MergeResult(commit=None, nothing=True)
    commit = _git_as_user_or_shep(
        root, "commit-tree", tree, "-p", old, "-m", message, doing=f"commit the squash of {branch}"
    ).stdout.strip()
    if holder is not None:
        _git(
            root,
            "merge",
            "--ff-only",
            "--no-verify-signatures",  # the user's merge.verifySignatures: ours is unsigned
            "--quiet",
            "--no-stat",
            commit,
            doing=f"update {base_branch} in {root}",
            fix="The checkout changed while merging; retry.",
        )
    else:
        _git(
            root,
            "update-ref",
            "-m",
            f"shep: squash-merge {branch}",
            base_ref,
            commit,
            old,
            doing=f"update {base_branch}",
            fix=f"{base_branch} moved while merging; retry.",
        )
    return MergeResult(commit=commit)


# --- remotes -------------------------------------------------------------------------


def push(repo: StrPath, branch: str, remote: str) -> None:
    """Push ``branch`` to the branch of the same name on ``remote`` and track it."""
    _git(
        repo,
        "push",
        "--quiet",
        "--set-upstream",
        remote,
        f"refs/heads/{branch}:refs/heads/{branch}",
        doing=f"push {branch} to {remote}",
        fix="Check the remote's URL and your credentials (`git push` by hand shows more).",
        timeout=NETWORK_TIMEOUT,
    )


def _gh(repo: StrPath, *args: str, doing: str) -> str:
    """Run ``gh args`` in ``repo``; its stdout. GitError when gh is missing or logged out."""
    try:
        done = subprocess.run(
            ["gh", *args],
            cwd=repo,
            env=_env({"GH_PROMPT_DISABLED": "1", "GH_NO_UPDATE_NOTIFIER": "1"}),
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=NETWORK_TIMEOUT,
            check=False,
        )
    except FileNotFoundError as e:
        raise GitError(
            f"Cannot {doing}: gh is not on PATH; install GitHub's gh CLI "
            "(https://cli.github.com) and run `gh auth login`."
        ) from e
    except subprocess.TimeoutExpired as e:
        raise GitError(f"Cannot {doing}: gh did not finish within {NETWORK_TIMEOUT:g}s.") from e
    if done.returncode != 0:
        if done.returncode == 4 or "gh auth login" in done.stderr:  # 4: gh's "auth needed"
            raise GitError(f"Cannot {doing}: gh is not logged in; run `gh auth login`.")
        reason = _reason(done.stderr) or f"gh exited with {done.returncode}"
        raise GitError(f"Cannot {doing}: {reason}.")
    return done.stdout


def open_pull_request(repo: StrPath, branch: str, base: str, title: str, body: str) -> PullRequest:
    """Open a pull request of ``branch`` into ``base`` with ``gh pr create`` (the branch
    must be pushed), then confirm it with ``gh pr view``. A pull request that already
    exists for the branch is returned as it is, so a retried step does not fail.
    """
    doing = f"open a pull request for {branch}"
    try:
        _gh(
            repo,
            "pr",
            "create",
            "--head",
            branch,
            "--base",
            base,
            "--title",
            title,
            "--body",
            body,
            doing=doing,
        )
    except GitError as e:
        if "already exists" not in str(e):
            raise
    shown = _gh(repo, "pr", "view", branch, "--json", "url,number", doing=doing)
    try:
        data = json.loads(shown)
        return PullRequest(url=str(data["url"]), number=int(data["number"]))
    except (ValueError, KeyError, TypeError) as e:
        raise GitError(f"Cannot {doing}: gh pr view printed {shown.strip()[:200]!r}.") from e


def restore_paths(worktree: StrPath, commit: str, paths: Sequence[str]) -> None:
    """Make each of ``paths`` as it is in ``commit``: rewritten, or removed when the commit
    has no such file. HEAD, the branch and the index are untouched.
    """
    target = resolve_commit(worktree, commit)
    root = Path(worktree)
    for path in paths:
        there = _git(
            worktree, "cat-file", "-e", f"{target}:{path}", doing="look up a file", ok=(0, 1, 128)
        )
        if there.returncode == 0:
            _git(
                worktree,
                "restore",
                f"--source={target}",
                "--worktree",
                "--",
                path,
                doing=f"restore {path} from {target[:10]}",
            )
        else:
            with suppress(FileNotFoundError):
                (root / path).unlink()


def find_commit(repo: StrPath, since: str, ref: str, text: str) -> str | None:
    """The newest commit of ``since..ref`` whose message contains the line ``text``."""
    found = _git(
        repo,
        "log",
        "--format=%H",
        "--fixed-strings",
        f"--grep={text}",
        f"{since}..{ref}",
        doing=f"search {ref} for {text!r}",
    ).stdout.split()
    return found[0] if found else None


def newest_ref_number(repo: StrPath, prefix: str) -> int:
    """The highest ``N`` among the refs ``PREFIX/N`` (0 when there is none)."""
    names = _git(
        repo, "for-each-ref", "--format=%(refname)", prefix, doing=f"list the refs under {prefix}"
    ).stdout.split()
    numbers = [int(n.rsplit("/", 1)[1]) for n in names if n.rsplit("/", 1)[1].isdigit()]
    return max(numbers, default=0)


def tree_of(repo: StrPath, commit: str) -> str:
    """The sha of ``commit``'s tree: the same for the same files, whatever the history."""
    done = _git(
        repo,
        "rev-parse",
        "--verify",
        "-q",
        "--end-of-options",
        f"{commit}^{{tree}}",
        doing=f"read the tree of {commit}",
    )
    return done.stdout.strip()
