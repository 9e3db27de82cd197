"""Merging a feature into the user's repository, and publishing it: the squash merge, push,
pull requests.

The squash merge is two steps, so the caller can record the commit it is about to put
on the base before the base moves (``MergePrepared``): :func:`prepare_squash` computes
the merge and makes the commit in the object store only, :func:`advance_base` moves the
base to it. After a crash between the two, or just after the second, only that recorded
commit can count as the merge (:func:`is_merged`), never a commit found by its message.

Git runs through ``shep.git.command`` as everywhere: the repository's hooks run at the
merge only when the user asked for them (the ``merge_hooks`` setting), its filter and
merge drivers only with ``git_filters``.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from events.errors import GitError
from shep.git.command import (
    NETWORK_TIMEOUT,
    Checkout,
    StrPath,
    environment,
    reason,
    run_git,
    run_git_as_author,
)
from shep.git.repo import (
    describe_files,
    dirty_files,
    repo_root,
    resolve_commit,
    same_path,
    worktrees,
)


@dataclass(frozen=True)
class Squash:
    """A squash merge of ``branch`` into ``base_branch``, computed on the base's tip
    ``onto``; nothing has moved yet.

    Exactly one of: ``commit`` set, with its ``tree`` (the commit to move the base to);
    ``conflicts`` non-empty; ``nothing`` true (the branch changes nothing on its base).
    ``checked_out``: the repository root when the base is checked out there.
    """

    base_branch: str
    branch: str
    onto: str
    commit: str | None = None
    tree: str | None = None
    conflicts: list[str] = field(default_factory=list)
    nothing: bool = False
    checked_out: Path | None = None


def _merge_tree(repo: Checkout, base_sha: str, tip: str) -> tuple[str, list[str]]:
    """The tree of merging ``tip`` into ``base_sha`` and its conflicted files, computed
    in the object store only (``merge-tree --write-tree``): no checkout is touched.
    """
    done = run_git(
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


def prepare_squash(
    repo: StrPath,
    base_branch: str,
    branch: str,
    message: str,
    *,
    drivers: bool = False,
    untracked_ok: Collection[str] = (),
) -> Squash:
    """Compute the squash merge of ``branch`` into ``base_branch`` in the user's repository
    ``repo`` and commit it in the object store: one new commit with the base's tip as its
    only parent, that no ref names yet. Nothing changes anywhere on a conflict (the
    files are in ``conflicts``), and a branch that changes nothing gives ``nothing``.

    GitError when the base is checked out in another worktree than ``repo``'s, or in
    ``repo`` with uncommitted changes (``untracked_ok``: see ``dirty_files``). The
    commit carries the user's identity when configured, else shep's. ``drivers``: the
    ``git_filters`` setting.
    """
    root = Checkout(repo_root(repo), drivers=drivers)
    base_ref = f"refs/heads/{base_branch}"
    old = resolve_commit(root, base_ref)
    tip = resolve_commit(root, f"refs/heads/{branch}")
    holder = next((tree for tree in worktrees(root) if tree.branch == base_branch), None)
    if holder is not None and not same_path(holder.path, root.path):
        raise GitError(
            f"{base_branch} is checked out in {holder.path}; merge there, or switch that "
            "worktree to another branch and retry."
        )
    if holder is not None:
        dirty = dirty_files(root, untracked_ok=untracked_ok)
        if dirty:
            raise GitError(
                f"{base_branch} has uncommitted changes in {root.path} "
                f"({describe_files(dirty)}); commit or stash them and retry."
            )
    checked_out = root.path if holder is not None else None
    tree, conflicts = _merge_tree(root, old, tip)
    if conflicts:
        return Squash(base_branch, branch, old, conflicts=conflicts, checked_out=checked_out)
    base_tree = run_git(root, "rev-parse", f"{old}^{{tree}}", doing="read the base's tree")
    if tree == base_tree.stdout.strip():
        return Squash(base_branch, branch, old, nothing=True, checked_out=checked_out)
    commit = run_git_as_author(
        root, "commit-tree", tree, "-p", old, "-m", message, doing=f"commit the squash of {branch}"
    ).stdout.strip()
    return Squash(base_branch, branch, old, commit=commit, tree=tree, checked_out=checked_out)


def advance_base(
    repo: StrPath, squash: Squash, *, hooks: bool = False, drivers: bool = False
) -> None:
    """Move the base to ``squash.commit``:

    - base checked out in ``repo``: ``git merge --ff-only`` to the commit, which moves
      the branch, index and files together, and refuses rather than overwrite anything
      if the checkout changed meanwhile.
    - base checked out nowhere: ``update-ref`` compare-and-set from the tip the merge
      was computed on (GitError if the base moved meanwhile).

    ``hooks``: the repository's hooks run (``post-merge``, ``reference-transaction``...:
    the ``merge_hooks`` setting); ``drivers``: the ``git_filters`` setting.
    """
    assert squash.commit is not None, "nothing to move the base to"
    root = Checkout(repo_root(repo), hooks=hooks, drivers=drivers)
    if squash.checked_out is not None:
        run_git(
            root,
            "merge",
            "--ff-only",
            "--no-verify-signatures",  # the user's merge.verifySignatures: ours is unsigned
            "--quiet",
            "--no-stat",
            squash.commit,
            doing=f"update {squash.base_branch} in {root.path}",
            fix="The checkout changed while merging; retry.",
        )
    else:
        run_git(
            root,
            "update-ref",
            "-m",
            f"shep: squash-merge {squash.branch}",
            f"refs/heads/{squash.base_branch}",
            squash.commit,
            squash.onto,
            doing=f"update {squash.base_branch}",
            fix=f"{squash.base_branch} moved while merging; retry.",
        )


def is_merged(repo: StrPath, commit: str, base_branch: str) -> bool:
    """Whether ``commit`` is on ``base_branch`` (its tip or an ancestor of it)."""
    done = run_git(
        repo,
        "merge-base",
        "--is-ancestor",
        commit,
        f"refs/heads/{base_branch}",
        doing=f"look for {commit[:10]} on {base_branch}",
        ok=(0, 1, 128),  # 128: the commit is gone (never on a branch) or the base is
    )
    return done.returncode == 0


# --- publishing ------------------------------------------------------------------------


@dataclass(frozen=True)
class PullRequest:
    """A pull request as ``gh pr view`` confirmed it."""

    url: str
    number: int


def push(repo: StrPath, branch: str, remote: str) -> None:
    """Push ``branch`` to the branch of the same name on ``remote`` and track it."""
    run_git(
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
            env=environment({"GH_PROMPT_DISABLED": "1", "GH_NO_UPDATE_NOTIFIER": "1"}),
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
        said = reason(done.stderr) or f"gh exited with {done.returncode}"
        raise GitError(f"Cannot {doing}: {said}.")
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
