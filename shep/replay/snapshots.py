"""Worktree snapshots in a replay: what changed from one to the next, asked of git
read-only.
"""

from __future__ import annotations

import os


def snapshot_diff_stat(repo: str, previous: str | None, snapshot: str) -> str:
    """``git diff --stat`` from ``previous`` (or the snapshot's parent) to ``snapshot`` in
    ``repo``, read-only; a sentence saying why when it cannot be made.
    """
    from events.errors import GitError
    from shep.git.command import run_git

    if not os.path.isdir(repo):
        return f"the repository {repo} is gone: no diff for snapshot {snapshot[:10]}"
    span = [previous, snapshot] if previous else [f"{snapshot}^!"]
    try:
        done = run_git(
            repo,
            "diff",
            "--stat",
            "--no-color",
            "--no-ext-diff",
            "--no-textconv",
            *span,
            doing=f"diff snapshot {snapshot[:10]}",
            ok=range(256),
            timeout=10,
        )
    except GitError as e:
        return f"git could not be run for the diff ({e})"
    if done.returncode != 0:
        problem = (done.stderr.strip().splitlines() or ["git failed"])[0]
        return f"no diff for snapshot {snapshot[:10]} in {repo}: {problem}"
    return done.stdout.rstrip() or "no files changed"


#: A patch longer than this (characters) is cut here, with a line saying so.
PATCH_LIMIT = 400_000


def snapshot_patch(repo: str, base: str, head: str, *, limit: int = PATCH_LIMIT) -> str:
    """The patch (``git diff``) from ``base`` to ``head`` (commits or trees) in ``repo``,
    read-only, cut at ``limit`` characters; a sentence saying why when it cannot be made.
    """
    from events.errors import GitError
    from shep.git.command import run_git

    if not os.path.isdir(repo):
        return f"the repository {repo} is gone: no diff for {head[:10]}"
    try:
        done = run_git(
            repo,
            "diff",
            "--no-color",
            "--no-ext-diff",
            "--no-textconv",
            base,
            head,
            doing=f"diff {base[:10]}..{head[:10]}",
            ok=range(256),
            timeout=10,
        )
    except GitError as e:
        return f"git could not be run for the diff ({e})"
    if done.returncode != 0:
        problem = (done.stderr.strip().splitlines() or ["git failed"])[0]
        return f"no diff for {base[:10]}..{head[:10]} in {repo}: {problem}"
    patch = done.stdout
    if len(patch) > limit:
        cut = len(patch) - limit
        patch = patch[:limit] + f"\n... ({cut} more characters: git diff {base} {head})\n"
    return patch
