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

from shep.git.branches import (
    add_worktree,
    delete_branch,
    free_branch_name,
    remove_worktree,
    slugify,
    worktree_git_dir,
)
from shep.git.repo import (
    DiffStat,
    Where,
    Worktree,
    branch_exists,
    changed_paths,
    commit_exists,
    current_branch,
    describe_files,
    diff_stat,
    dirty_files,
    has_remote,
    newest_ref_number,
    promisor_remote,
    repo_root,
    resolve_commit,
    same_path,
    tree_of,
    worktrees,
)
from shep.git.snapshots import (
    commit_all,
    files_tree,
    restore,
    restore_paths,
    snapshot,
)

__all__ = [
    "DiffStat",
    "Where",
    "Worktree",
    "add_worktree",
    "branch_exists",
    "changed_paths",
    "commit_all",
    "commit_exists",
    "current_branch",
    "delete_branch",
    "describe_files",
    "diff_stat",
    "dirty_files",
    "files_tree",
    "free_branch_name",
    "has_remote",
    "newest_ref_number",
    "promisor_remote",
    "remove_worktree",
    "repo_root",
    "resolve_commit",
    "restore",
    "restore_paths",
    "same_path",
    "slugify",
    "snapshot",
    "tree_of",
    "worktree_git_dir",
    "worktrees",
]
